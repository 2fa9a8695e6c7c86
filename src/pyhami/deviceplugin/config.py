"""The device plugin's effective settings: built-in defaults < CLI flags < device-config YAML <
per-node JSON (the `nodeconfig` entry naming this node).

Deviations from HAMi, on purpose:
- CLI flags take effect (HAMi parses `--device-split-count` & co. and ignores them); they act as
  defaults that the config files override, so HAMi's chart, which always passes
  `--disable-core-limit=false`, cannot undo a `disableCoreLimit: true` in the YAML.
- A per-node JSON value that is present wins even when it is zero, false or empty (HAMi's mergo
  merge cannot turn `enablenumatopology` off or set `libcudaloglevel: ""` per node).
- Knobs absent everywhere default to the chart's values instead of crashing.
- A missing per-node file means mode `hami-core` (HAMi publishes an empty mode then); an
  unreadable or invalid one is an error naming the file, the node entry and the key.
"""

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyhami.devices.config import (
    DeviceConfigError,
    MigAllowlistEntry,
    NvidiaConfig,
    parse_device_config,
)

NODE_CONFIG_PATH = Path("/config/config.json")


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names the file and the key."""


class OperatingMode(enum.StrEnum):
    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"  # HAMi: only the published mode differs; Allocate is hami-core


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    """GPUs hidden from kubelet and the scheduler (`filterdevices`)."""

    uuids: frozenset[str] = frozenset()
    indices: frozenset[int] = frozenset()

    def hides(self, uuid: str, index: int) -> bool:
        return uuid in self.uuids or index in self.indices


@dataclass(frozen=True, slots=True)
class VgpuConfig:
    """The vGPU knobs (split count, scaling, core limit, ...) after every layer is applied."""

    resource_name: str = "nvidia.com/gpu"
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    preconfigured_device_memory: int = 0  # MiB; 0 = skip GPUs whose memory NVML cannot tell
    lib_cuda_log_level: str = ""
    enable_numa_topology: bool = False
    disable_core_limit: bool = False
    # The webhook's knobs the limits file repeats (device-config YAML only, as in the webhook).
    priority_resource: str = "nvidia.com/priority"
    core_policy: str = "default"
    operating_mode: str = OperatingMode.HAMI_CORE.value  # other strings behave like hami-core
    device_filter: DeviceFilter = field(default_factory=DeviceFilter)
    enable_preferred_allocation: bool = False
    mig_profile_allowlist: tuple[MigAllowlistEntry, ...] = ()

    def check(self, where: str) -> "VgpuConfig":
        """Refuse values that would publish nonsense; `where` names the source in the error."""
        if "/" not in self.resource_name:
            raise ConfigError(f"{where}: resourceCountName {self.resource_name!r} needs a domain")
        if not 1 <= self.device_split_count <= 512:
            raise ConfigError(
                f"{where}: deviceSplitCount must be 1..512, got {self.device_split_count}"
            )
        if self.device_memory_scaling <= 0:
            raise ConfigError(
                f"{where}: deviceMemoryScaling must be > 0, got {self.device_memory_scaling}"
            )
        if self.device_core_scaling <= 0:
            raise ConfigError(
                f"{where}: deviceCoreScaling must be > 0, got {self.device_core_scaling}"
            )
        if self.preconfigured_device_memory < 0:
            raise ConfigError(
                f"{where}: preConfiguredDeviceMemory must be >= 0 MiB, "
                f"got {self.preconfigured_device_memory}"
            )
        if self.operating_mode == OperatingMode.MIG and not self.mig_profile_allowlist:
            raise ConfigError(
                f"{where}: operating mode 'mig' (dynamic MIG) needs nvidia.migProfileAllowlist "
                "in the device config (which MIG profiles to offer on which GPU models)"
            )
        return self


# (key lower-cased, VgpuConfig field, expected type) of the per-node JSON knobs. Go's JSON
# decoder matches keys case-insensitively, so they are read that way.
_NODE_KEYS: tuple[tuple[str, str, type], ...] = (
    ("devicesplitcount", "device_split_count", int),
    ("devicememoryscaling", "device_memory_scaling", float),
    ("devicecorescaling", "device_core_scaling", float),
    ("preconfigureddevicememory", "preconfigured_device_memory", int),
    ("libcudaloglevel", "lib_cuda_log_level", str),
    ("enablenumatopology", "enable_numa_topology", bool),
    ("enablegetpreferredallocation", "enable_preferred_allocation", bool),
    ("operatingmode", "operating_mode", str),
)
# NvidiaConfig field (pyhami.devices) -> VgpuConfig field, for the knobs the plugin uses.
_YAML_FIELDS = {
    "resource_count_name": "resource_name",
    "device_split_count": "device_split_count",
    "device_memory_scaling": "device_memory_scaling",
    "device_core_scaling": "device_core_scaling",
    "pre_configured_device_memory": "preconfigured_device_memory",
    "lib_cuda_log_level": "lib_cuda_log_level",
    "enable_numa_topology": "enable_numa_topology",
    "disable_core_limit": "disable_core_limit",
    "resource_priority_name": "priority_resource",
    "gpu_core_policy": "core_policy",
    "mig_profile_allowlist": "mig_profile_allowlist",
}


def _typed(where: str, key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # libCudaLogLevel is often written as a bare number
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise ConfigError(f"{where}: {key} must be {kind.__name__}, got {value!r}")


def apply_device_config(base: VgpuConfig, nvidia: NvidiaConfig) -> VgpuConfig:
    """Overlay the keys the device-config YAML's `nvidia:` block actually sets."""
    changes: dict[str, Any] = {
        ours: getattr(nvidia, theirs)
        for theirs, ours in _YAML_FIELDS.items()
        if theirs in nvidia.model_fields_set
    }
    if "lib_cuda_log_level" in changes:
        changes["lib_cuda_log_level"] = str(changes["lib_cuda_log_level"])
    return replace(base, **changes)


def load_device_config(base: VgpuConfig, path: Path) -> VgpuConfig:
    """Apply HAMi's device-config YAML (parsed and validated by `pyhami.devices`)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read device config: {error}") from error
    try:
        parsed = parse_device_config(text, source=str(path))
    except DeviceConfigError as error:
        raise ConfigError(str(error)) from error
    return apply_device_config(base, parsed.nvidia)


def _device_filter(where: str, raw: Any) -> DeviceFilter:
    if raw is None:
        return DeviceFilter()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: filterdevices must be an object, got {raw!r}")
    lowered = {str(k).lower(): v for k, v in raw.items()}
    uuids = lowered.get("uuid") or []
    indices = lowered.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{where}: filterdevices.uuid must be a list of strings, got {uuids!r}")
    if not isinstance(indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices
    ):
        raise ConfigError(
            f"{where}: filterdevices.index must be a list of non-negative integers, got {indices!r}"
        )
    return DeviceFilter(uuids=frozenset(uuids), indices=frozenset(indices))


def apply_node_config(base: VgpuConfig, document: Any, node_name: str, where: str) -> VgpuConfig:
    """Overlay every `nodeconfig[]` entry named `node_name`, in file order (later wins)."""
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: expected an object with a 'nodeconfig' list")
    lowered = {str(k).lower(): v for k, v in document.items()}
    entries = lowered.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: 'nodeconfig' must be a list")
    config = base
    for position, entry in enumerate(entries):
        entry_where = f"{where}: nodeconfig[{position}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{entry_where} must be an object")
        entry_lowered = {str(k).lower(): v for k, v in entry.items()}
        if entry_lowered.get("name") != node_name:
            continue
        changes: dict[str, Any] = {
            name: _typed(entry_where, key, entry_lowered[key], kind)
            for key, name, kind in _NODE_KEYS
            if entry_lowered.get(key) is not None
        }
        config = replace(config, **changes)
        if "filterdevices" in entry_lowered:
            config = replace(
                config, device_filter=_device_filter(entry_where, entry_lowered["filterdevices"])
            )
    return config


def load_node_config(base: VgpuConfig, path: Path, node_name: str) -> VgpuConfig:
    """Apply the per-node JSON file; a missing file changes nothing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return base
    except OSError as error:
        raise ConfigError(f"{path}: cannot read per-node config: {error}") from error
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON: {error}") from error
    return apply_node_config(base, document, node_name, str(path))
