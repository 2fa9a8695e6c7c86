"""One ResourceSlice per node: every GPU a device kube-scheduler can share by memory and cores.

Each GPU is published as device `gpu-<index>` in pool `<node name>` with
* attributes (in the driver's own domain): uuid, index, productName, numaNode, pciBusID,
  driverVersion, cudaVersion, migCapable, and where NVML sees NVLinks nvlinkPeers (the uuids
  of directly linked GPUs, comma-separated) and nvlinkDomain (one name for every GPU reachable
  over NVLink, so a claim's `matchAttribute` keeps its GPUs on one NVLink island);
* capacities `memory` (bytes) and `cores` (percent of the SMs, 100), with
  `allowMultipleAllocations: true` so many claims share one card (KEP-5075). A claim that names
  no amount takes the whole card (the defaults), as a HAMi pod without gpumem/gpucores does;
  memory is granted in MiB steps (libvgpu's limits are MiB), cores in steps of 1, and 0 cores
  means "no SM limit", as HAMi's gpucores=0;
* a `NoSchedule` taint `gpu.pyhami.io/unhealthy` while the health board marks it unhealthy
  (running claims stay; new ones are not placed there). It goes away on recovery.
"""

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

from pyhami.deviceplugin.health import HealthBoard, sleep_unless
from pyhami.deviceplugin.inventory import Gpu
from pyhami.devices.nvidia.dra_claims import MIB
from pyhami.dra.api import DRIVER
from pyhami.kube import RESOURCE_SLICES, KubeClient, NotFound
from pyhami.kube.dra_manifests import SliceDevice, Version, resource_slice
from pyhami.kube.dra_views import read_slice
from pyhami.kube.errors import KubeError
from pyhami.nvml import Nvml, NvmlError, NvmlNotSupportedError

log = logging.getLogger(__name__)

_LABEL_VALUE_MAX = 63


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What the slice says about one GPU, read from NVML at start."""

    gpu: Gpu
    memory_bytes: int
    driver_version: str
    cuda_version: int  # 1000 * major + 10 * minor
    mig_capable: bool
    nvlink_peers: tuple[str, ...] = ()  # uuids of directly NVLinked GPUs
    nvlink_domain: str | None = None


def device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}"


def slice_name(node_name: str) -> str:
    return f"{node_name}-{DRIVER}"


def cuda_semver(encoded: int) -> str:
    """NVML's 12080 as a semantic version, `12.8.0`."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}.0"


def _mig_capable(nvml: Nvml, index: int) -> bool:
    try:
        nvml.mig_mode(index)
    except NvmlNotSupportedError:
        return False
    return True


def _nvlink_domains(peers: Mapping[str, set[str]]) -> dict[str, str]:
    """Every GPU with an NVLink, named by the smallest uuid of its connected island."""
    domains: dict[str, str] = {}
    for start in sorted(peers):
        if start in domains or not peers[start]:
            continue
        island, todo = {start}, [start]
        while todo:
            for peer in peers[todo.pop()]:
                if peer not in island:
                    island.add(peer)
                    todo.append(peer)
        name = min(island)
        domains.update(dict.fromkeys(island, name))
    return domains


def read_facts(nvml: Nvml, gpus: Sequence[Gpu]) -> tuple[GpuFacts, ...]:
    """Ask NVML for what the slice publishes (raises NvmlError when a card cannot be read)."""
    driver = nvml.driver_version()
    cuda = nvml.cuda_driver_version()
    by_bus = {gpu.bus_id: gpu.uuid for gpu in gpus}
    peers: dict[str, set[str]] = {}
    for gpu in gpus:
        # A link to an NVSwitch or to a GPU the device filter hides joins no published pair.
        remotes = {link.remote_bus_id for link in nvml.nvlinks(gpu.index)} & by_bus.keys()
        peers[gpu.uuid] = {by_bus[bus] for bus in remotes} - {gpu.uuid}
    # A link seen from one side only still joins the two cards.
    for uuid, linked in list(peers.items()):
        for peer in linked:
            peers[peer].add(uuid)
    domains = _nvlink_domains(peers)
    facts: list[GpuFacts] = []
    for gpu in gpus:
        try:
            memory = nvml.device_memory(gpu.index).total
        except NvmlNotSupportedError as error:
            raise NvmlError(
                "nvmlDeviceGetMemoryInfo",
                f"GPU {gpu.index} ({gpu.uuid}) does not report its memory, so it cannot be "
                "shared by memory (unified-memory boards are not supported by the DRA driver)",
            ) from error
        facts.append(
            GpuFacts(
                gpu=gpu,
                memory_bytes=memory // MIB * MIB,
                driver_version=driver,
                cuda_version=cuda,
                mig_capable=_mig_capable(nvml, gpu.index),
                nvlink_peers=tuple(sorted(peers[gpu.uuid])),
                nvlink_domain=domains.get(gpu.uuid),
            )
        )
    return tuple(facts)


def _label_value(text: str) -> str:
    """A taint value is a label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:_LABEL_VALUE_MAX]
    return cleaned.strip("._-")


def slice_device(facts: GpuFacts, trouble: str | None) -> SliceDevice:
    """What the ResourceSlice says of one GPU; `trouble` is why it is unhealthy, or None."""
    gpu = facts.gpu
    attributes: dict[str, str | int | bool | Version] = {
        "uuid": gpu.uuid,
        "index": gpu.index,
        "productName": gpu.name,
        "pciBusID": gpu.bus_id,
        "driverVersion": facts.driver_version,
        "cudaVersion": Version(cuda_semver(facts.cuda_version)),
        "migCapable": facts.mig_capable,
    }
    if gpu.numa is not None:
        attributes["numaNode"] = gpu.numa
    if facts.nvlink_peers:
        # One comma-joined string: list-valued attributes are still alpha (off by default).
        attributes["nvlinkPeers"] = ",".join(facts.nvlink_peers)
    if facts.nvlink_domain is not None:
        attributes["nvlinkDomain"] = facts.nvlink_domain
    return SliceDevice(
        name=device_name(gpu),
        attributes=attributes,
        memory_bytes=facts.memory_bytes,
        unhealthy=None if trouble is None else _label_value(trouble),
    )


@dataclass(eq=False)
class SlicePublisher:
    """Keeps this node's ResourceSlice equal to the GPUs and their health."""

    kube: KubeClient
    node_name: str
    facts: Sequence[GpuFacts]
    board: HealthBoard
    _: KW_ONLY
    node_uid: str = ""
    retry_interval: float = 5.0
    published: int = field(default=0, init=False)  # successful writes, for logs and tests
    _written: list[SliceDevice] | None = field(default=None, init=False)  # our last write

    @property
    def name(self) -> str:
        return slice_name(self.node_name)

    async def publish(self) -> None:
        """Create or update the slice, unless it already says what this process last wrote
        (raises KubeError). The first publish of a process always writes, so a slice left by an
        older driver is brought up to date."""
        troubles = {f.gpu.uuid: self.board.trouble(f.gpu.uuid) for f in self.facts}
        trouble = {uuid: t.reason for uuid, t in troubles.items() if t is not None}
        devices = [slice_device(f, trouble.get(f.gpu.uuid)) for f in self.facts]
        if devices == self._written:
            return
        try:
            current = read_slice(await self.kube.get(RESOURCE_SLICES, self.name))
        except NotFound:
            body = resource_slice(self.name, self.node_name, devices, 0, node_uid=self.node_uid)
            await self.kube.create(RESOURCE_SLICES, body)
        else:
            # The pool generation goes up with every change, so consumers tell old from new.
            body = resource_slice(
                self.name,
                self.node_name,
                devices,
                current.generation + 1,
                node_uid=self.node_uid,
                resource_version=current.resource_version,
            )
            await self.kube.replace(RESOURCE_SLICES, self.name, body)
        self._written = devices
        self.published += 1
        log.info(
            "published ResourceSlice %s: %d GPUs, %d tainted unhealthy",
            self.name,
            len(self.facts),
            len(trouble),
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Publish now and after every health change, retrying failures, until `stop`."""
        while not stop.is_set():
            seen = self.board.version
            try:
                await self.publish()
            except KubeError as error:
                log.error("cannot publish ResourceSlice %s, retrying: %s", self.name, error)
                await sleep_unless(stop, self.retry_interval)
                continue
            await self.board.until_change(seen, stop)
