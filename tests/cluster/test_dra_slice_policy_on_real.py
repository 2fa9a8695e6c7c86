"""The chart's ValidatingAdmissionPolicy on Kubernetes' own control plane: the DRA driver's
ServiceAccount writes the ResourceSlice of the node its pod runs on and no other, and with a
token not bound to a pod on a node it writes none (RBAC alone would allow every node's)."""

import asyncio
from pathlib import Path

import yaml

from pyhami.controlplane import BuiltBinaries
from pyhami.dra.slices import slice_name
from pyhami.kube import NODES, PODS, RESOURCE_SLICES, Forbidden, KubeClient
from pyhami.kube.dra_manifests import resource_slice
from pyhami.sim.demo.cluster import COMPONENT_NAMESPACE, DRA_DRIVER_USER
from pyhami.testing.real_cluster import RealControlPlane, kubeconfig

from .conftest import render_chart

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
DRIVER_ACCOUNT = DRA_DRIVER_USER.rsplit(":", 1)[1]


def gpu_slice(node: str) -> dict[str, object]:
    return resource_slice(slice_name(node), node, (), 1)


async def token_of_pod_on(plane: RealControlPlane, admin: KubeClient, node: str) -> KubeClient:
    """A client with a token of the driver's account bound to a driver pod on `node`, as the
    kubelet projects it into the DaemonSet's pod."""
    await admin.create(NODES, {"metadata": {"name": node}})
    pod = await admin.create(
        PODS,
        {
            "metadata": {"name": f"driver-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": DRIVER_ACCOUNT,
                "containers": [{"name": "dra-driver", "image": "pyhami"}],
            },
        },
        COMPONENT_NAMESPACE,
    )
    base = f"/api/v1/namespaces/{COMPONENT_NAMESPACE}/serviceaccounts/{DRIVER_ACCOUNT}"
    answer = await admin.request(
        "POST",
        f"{base}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                }
            },
        },
    )
    path = plane.workdir / f"driver-{node}.kubeconfig"
    token = str(answer["status"]["token"])
    path.write_text(kubeconfig(plane.url, plane.ca.cert_file, token=token))
    return await plane.client(path)


async def refused(client: KubeClient, admin: KubeClient, node: str, timeout_s: float = 30) -> str:
    """The policy's message for a slice of `node` (it takes effect moments after it is made:
    a slice written before that is deleted by the admin and tried again)."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                await client.create(RESOURCE_SLICES, gpu_slice(node))
            except Forbidden as err:
                return str(err)
            await admin.delete(RESOURCE_SLICES, slice_name(node))
            await asyncio.sleep(0.2)


async def test_the_driver_writes_only_its_own_nodes_resource_slice(
    kubernetes: BuiltBinaries, tmp_path: Path
) -> None:
    chart = render_chart("dra.mode=selected")
    async with RealControlPlane(kubernetes, tmp_path / "k8s", dra=True) as plane:
        wanted = [o for o in chart if o["kind"] in RBAC_KINDS + POLICY_KINDS]
        await plane.apply(yaml.safe_dump_all(wanted))
        admin = await plane.client(plane.admin_kubeconfig)
        on_gpu_1 = await token_of_pod_on(plane, admin, "gpu-1")
        await admin.create(NODES, {"metadata": {"name": "gpu-2"}})

        message = await refused(on_gpu_1, admin, "gpu-2")
        assert "the DRA driver on node gpu-1 may not write the ResourceSlice of node gpu-2" in (
            message
        )
        own = await on_gpu_1.create(RESOURCE_SLICES, gpu_slice("gpu-1"))
        own["spec"]["devices"] = []
        await on_gpu_1.replace(RESOURCE_SLICES, slice_name("gpu-1"), own)
        await admin.delete(RESOURCE_SLICES, slice_name("gpu-1"))

        unbound = await plane.client(await plane.kubeconfig_of(DRA_DRIVER_USER))
        message = await refused(unbound, admin, "gpu-1")
        assert "only with a token bound to its pod on a node" in message
        # another identity is not the policy's business: RBAC alone judges it
        await admin.create(RESOURCE_SLICES, gpu_slice("gpu-2"))
