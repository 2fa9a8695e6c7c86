"""ResourceClaims and pods as kube-scheduler leaves them for a DRA driver, for tests and the demo.

made = create_claimed_pod(store, "trainer", "train", [allocation_result(pool="n1")], node="n1")
"""

from collections.abc import Sequence
from dataclasses import dataclass

from pyhami.dra.api import DRIVER
from pyhami.model.dra import DeviceResultView
from pyhami.testing.fake_apiserver.store import ObjectStore

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
    admin_access: bool = False,
) -> DeviceResultView:
    """One `status.allocation.devices.results` entry for a device shared by capacity; None
    leaves the consumed amount (or the share id) out."""
    amounts = {"memory": memory, "cores": cores}
    consumed = {name: value for name, value in amounts.items() if value is not None}
    return DeviceResultView(request, driver, pool, device, admin_access, share_id, consumed)


@dataclass(frozen=True, slots=True)
class ClaimedPod:
    pod_uid: str
    claim_uid: str


def create_claimed_pod(
    store: ObjectStore,
    name: str,
    claim: str,
    results: Sequence[DeviceResultView],
    *,
    node: str,
    allocated: bool = True,
) -> ClaimedPod:
    """Creates pod `name` in `default`, bound to `node`, whose container `main` uses the claim
    (beside a sidecar that does not), then claim `claim` for one request of class
    gpu.pyhami.io, allocated with `results` (unless not `allocated`) and reserved for the pod."""
    main = {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
    claims = [{"name": "gpu", "resourceClaimName": claim}]
    sidecar = {"name": "sidecar", "image": "busybox"}  # uses no claim
    spec = {"nodeName": node, "resourceClaims": claims, "containers": [sidecar, main]}
    pod = store.create("pods", "default", {"metadata": {"name": name}, "spec": spec})
    pod_uid = pod.meta.uid
    entries = [
        {
            "request": r.request,
            "driver": r.driver,
            "pool": r.pool,
            "device": r.device,
            **({"consumedCapacity": dict(r.consumed)} if r.consumed else {}),
            **({"shareID": r.share_id} if r.share_id is not None else {}),
            **({"adminAccess": True} if r.admin_access else {}),
        }
        for r in results
    ]
    status = {
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod_uid}],
        **({"allocation": {"devices": {"results": entries}}} if allocated else {}),
    }
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}
    claim_spec = {"devices": {"requests": [request]}}
    body = {"metadata": {"name": claim}, "spec": claim_spec, "status": status}
    created = store.create("resourceclaims", "default", body)
    return ClaimedPod(pod_uid, created.meta.uid)
