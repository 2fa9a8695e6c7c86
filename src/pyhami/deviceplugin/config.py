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
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    ValidationError,
    model_validator,
)

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


def _lowered(mapping: Mapping[object, object]) -> dict[str, object]:
    return {str(key).lower(): value for key, value in mapping.items()}


def _number_as_text(value: object) -> object:
    # libCudaLogLevel is often written as a bare number.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


_Text = Annotated[str, BeforeValidator(_number_as_text)]


class _NodeJson(BaseModel):
    """Per-node JSON: keys match case-insensitively, as Go's JSON decoder does; values have
    exactly their type (no bool as a number, no number as a bool); null counts as absent."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _keys_lowered(cls, value: object) -> object:
        return _lowered(value) if isinstance(value, Mapping) else value


class _FilterDevices(_NodeJson):
    uuid: list[str] | None = None
    index: list[NonNegativeInt] | None = None


class _NodeEntry(_NodeJson):
    """One `nodeconfig[]` entry; the fields are VgpuConfig's, the aliases the JSON keys."""

    device_split_count: int | None = Field(None, alias="devicesplitcount")
    device_memory_scaling: float | None = Field(None, alias="devicememoryscaling")
    device_core_scaling: float | None = Field(None, alias="devicecorescaling")
    preconfigured_device_memory: int | None = Field(None, alias="preconfigureddevicememory")
    lib_cuda_log_level: _Text | None = Field(None, alias="libcudaloglevel")
    enable_numa_topology: bool | None = Field(None, alias="enablenumatopology")
    enable_preferred_allocation: bool | None = Field(None, alias="enablegetpreferredallocation")
    operating_mode: _Text | None = Field(None, alias="operatingmode")
    filterdevices: _FilterDevices | None = None


def apply_node_config(base: VgpuConfig, document: Any, node_name: str, where: str) -> VgpuConfig:
    """Overlay every `nodeconfig[]` entry named `node_name`, in file order (later wins)."""
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: expected an object with a 'nodeconfig' list")
    entries = _lowered(document).get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: 'nodeconfig' must be a list")
    config = base
    for position, raw in enumerate(entries):
        entry_where = f"{where}: nodeconfig[{position}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{entry_where} must be an object")
        if _lowered(raw).get("name") != node_name:
            continue
        try:
            entry = _NodeEntry.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}, got {e['input']!r}"
                for e in error.errors()
            )
            raise ConfigError(f"{entry_where}: {problems}") from error
        config = replace(config, **entry.model_dump(exclude_none=True, exclude={"filterdevices"}))
        if "filterdevices" in entry.model_fields_set:
            hidden = entry.filterdevices or _FilterDevices()
            uuids, indices = frozenset(hidden.uuid or ()), frozenset(hidden.index or ())
            config = replace(config, device_filter=DeviceFilter(uuids, indices))
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
