"""kubelet's DRA part for the node agent: before a pod's containers start, each of its allocated
ResourceClaims is prepared by the claim's driver (`NodePrepareResources` over the plugin the
`DRAKubelet` registered), and the CDI devices the driver names are resolved in the CDI spec
files into the env and mounts the container runtime applies; when no pod on the node uses a
claim any more, it is unprepared (`NodeUnprepareResources`).

Which claims a pod has: `status.resourceClaimStatuses` (made from templates by
kube-controller-manager), `spec.resourceClaims[].resourceClaimName` (made by the user) and
`status.extendedResourceClaimStatus` (made by kube-scheduler for an extended resource backed
by a DeviceClass). Which container gets which devices: a container's `resources.claims`
(the whole claim, or one request of it), or the extended-resource request mapping.

CDI (the Container Device Interface spec files a driver writes, JSON or YAML): a device id
`vendor/class=name` names device `name` of the spec whose `kind` is `vendor/class`; its
`containerEdits` and the spec's own apply, env as `KEY=value`, mounts with `ro` in options
when read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc.aio

from pyhami.kube import RESOURCE_CLAIMS, KubeClient, KubeError
from pyhami.kube.dra_views import read_claim
from pyhami.kube.manifests import ClaimUse, PodState
from pyhami.model import PodView
from pyhami.model.dra import ClaimSpecError
from pyhami.testing.dra_kubelet import ClaimRef, DRAKubelet, DRAKubeletError, cdi_edits
from pyhami.testing.node_agent import (
    ClaimsNotPreparedError,
    ContainerEdits,
    ContainerMount,
    PodKey,
)


def claim_uses(pod: PodView) -> list[ClaimUse]:
    """Every (container, claim, request) the pod's containers use."""
    for container in pod.all_containers:
        for entry, _ in container.claims:
            if entry not in pod.resource_claims:
                raise ClaimsNotPreparedError(
                    f"container {container.label} uses claim {entry!r}, "
                    "which has no ResourceClaim yet"
                )
    uses = list(PodState(pod).claims)
    extended = pod.extended_claim
    if extended is not None:
        uses += [ClaimUse(name, extended.claim_name, req) for name, _, req in extended.mappings]
    return uses


def resolve_cdi(device_ids: Sequence[str], directories: Sequence[Path]) -> ContainerEdits:
    """The env and mounts CDI device ids add (a later device's env wins, as in the runtime);
    ClaimsNotPreparedError when a device is in no spec of `directories`."""
    envs: dict[str, str] = {}
    mounts: list[ContainerMount] = []
    for device_id in device_ids:
        try:
            edits = cdi_edits(directories, device_id)
        except DRAKubeletError as err:
            raise ClaimsNotPreparedError(f"unresolvable CDI device {device_id}: {err}") from err
        envs.update(edits.env)
        mounts += [
            ContainerMount(m.container_path, m.host_path, "ro" in m.options) for m in edits.mounts
        ]
    return ContainerEdits(tuple(device_ids), envs, tuple(mounts))


class ClaimPreparer:
    """Prepares and unprepares one node's pods' claims, as kubelet's DRA manager does."""

    def __init__(self, client: KubeClient, kubelet: DRAKubelet, cdi_dirs: Sequence[Path]) -> None:
        self._client = client
        self._kubelet = kubelet
        self._cdi_dirs = tuple(cdi_dirs)
        # claim (namespace, name) -> its reference and drivers, and the pods here using it
        self._prepared: dict[PodKey, tuple[ClaimRef, tuple[str, ...]]] = {}
        self._users: dict[PodKey, set[PodKey]] = {}

    async def prepare(self, pod: PodView) -> dict[str, ContainerEdits]:
        """Prepare the pod's claims; container name -> the edits its devices add. Raises
        ClaimsNotPreparedError (a claim not readable or not allocated yet, a driver not registered
        or failing, a CDI device not resolvable)."""
        namespace, pod_name = pod.namespace, pod.name
        uses = claim_uses(pod)
        devices: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]] = {}
        for claim_name in sorted({use.claim for use in uses}):
            devices[claim_name] = await self._prepare_claim(namespace, claim_name)
            self._users.setdefault((namespace, claim_name), set()).add((namespace, pod_name))
        edits: dict[str, list[str]] = {}
        for use in uses:
            for requests, cdi_ids in devices[use.claim]:
                if not use.request or use.request in requests:
                    edits.setdefault(use.container, []).extend(cdi_ids)
        return {name: resolve_cdi(ids, self._cdi_dirs) for name, ids in edits.items()}

    async def _prepare_claim(
        self, namespace: str, name: str
    ) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        try:
            claim = read_claim(await self._client.get(RESOURCE_CLAIMS, name, namespace))
        except (KubeError, ClaimSpecError) as err:
            # e.g. 403 until the Node authorizer's graph links the newly bound pod to its claim
            raise ClaimsNotPreparedError(f"ResourceClaim {namespace}/{name}: {err}") from err
        if not claim.allocated:
            raise ClaimsNotPreparedError(f"ResourceClaim {namespace}/{name} is not allocated")
        drivers = sorted({result.driver for result in claim.results})
        ref = ClaimRef(namespace, name, claim.uid)
        prepared: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        for driver in drivers:
            try:
                answer = (await self._kubelet.plugin(driver).prepare([ref])).claims.get(ref.uid)
            except DRAKubeletError as err:
                raise ClaimsNotPreparedError(str(err)) from err
            except grpc.aio.AioRpcError as err:
                answer = None
                why = f"{err.code().name}: {err.details()}"
            else:
                why = answer.error if answer is not None else "no answer for the claim"
            if answer is None or answer.error:
                raise ClaimsNotPreparedError(
                    f"{driver} could not prepare ResourceClaim {namespace}/{name}: {why}"
                )
            prepared += [(tuple(d.request_names), tuple(d.cdi_device_ids)) for d in answer.devices]
        self._prepared[(namespace, name)] = (ref, tuple(drivers))
        return prepared

    async def release(self, pod_key: PodKey) -> list[str]:
        """The pod no longer runs here: unprepare each claim no other pod here uses; the
        drivers' errors, if any."""
        errors = []
        for claim in sorted(claim for claim, pods in self._users.items() if pod_key in pods):
            users = self._users[claim]
            users.discard(pod_key)
            if users:
                continue
            del self._users[claim]
            prepared = self._prepared.pop(claim, None)
            if prepared is not None:
                ref, drivers = prepared
                for driver in drivers:
                    errors += await self._unprepare(driver, ref)
        return errors

    async def _unprepare(self, driver: str, ref: ClaimRef) -> list[str]:
        plugin = self._kubelet.plugins.get(driver)
        if plugin is None:
            return [f"{driver} is not registered: {ref.name} stays prepared"]
        try:
            answer = (await plugin.unprepare([ref])).claims.get(ref.uid)
        except grpc.aio.AioRpcError as err:
            return [f"{driver} could not unprepare {ref.name}: {err.details()}"]
        if answer is not None and answer.error:
            return [f"{driver} could not unprepare {ref.name}: {answer.error}"]
        return []
