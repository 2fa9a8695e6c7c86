"""ResourceClaims and pods as kube-scheduler leaves them for a DRA driver, for tests and the demo.

pod = store.create("pods", "default", pod_using_claim("trainer", "train", node="n1"))
claim = claim_object("train", [allocation_result("gpu-0", pool="n1")], reserved_for=pod.body)
"""

from typing import Any

from pyhami.dra.api import DRIVER

SHARE_ID = "7a0c5c0e-0000-4000-8000-000000000001"


def allocation_result(
    device: str = "gpu-0",
    *,
    pool: str,
    memory: str | None = "4Gi",
    cores: str | None = "30",
    request: str = "gpu",
    driver: str = DRIVER,
    share_id: str | None = SHARE_ID,
) -> dict[str, Any]:
    """One `status.allocation.devices.results` entry for a device shared by capacity; None
    leaves the consumed amount (or the share id) out."""
    consumed = {}
    if memory is not None:
        consumed["memory"] = memory
    if cores is not None:
        consumed["cores"] = cores
    entry: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if consumed:
        entry["consumedCapacity"] = consumed
    if share_id is not None:
        entry["shareID"] = share_id
    return entry


def pod_using_claim(name: str, claim: str, *, node: str, container: str = "main") -> dict[str, Any]:
    """A pod bound to `node` whose `container` uses the claim (beside a sidecar that does not)."""
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "sidecar", "image": "busybox"},
                {"name": container, "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}},
            ],
        },
    }


def claim_object(
    name: str,
    results: list[dict[str, Any]],
    *,
    reserved_for: dict[str, Any],
    allocated: bool = True,
) -> dict[str, Any]:
    """A claim for one request of class gpu.pyhami.io, allocated with `results` (unless not
    `allocated`) and reserved for the pod object `reserved_for`."""
    metadata = reserved_for["metadata"]
    status: dict[str, Any] = {
        "reservedFor": [{"resource": "pods", "name": metadata["name"], "uid": metadata["uid"]}]
    }
    if allocated:
        status["allocation"] = {"devices": {"results": results}}
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
        "status": status,
    }
