"""HAMi's `device-config.yaml`, as pydantic models with the chart's defaults.

HAMi reads the file with yaml.v2, non-strict: unknown keys are ignored, and so are we.
Sections of vendors pyhami has no backend for yet only count as set (HAMi refuses a file
with none set); their content is not read.
Unlike HAMi, a value of the wrong type is an error naming the key, never a silent zero.
"""

import re

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Vendor sections HAMi knows (config.go); all but `nvidia` are kept raw until a backend exists.
KNOWN_SECTIONS = (
    "nvidia",
    "metax",
    "hygon",
    "cambricon",
    "mthreads",
    "iluvatars",
    "enflame",
    "kunlun",
    "awsneuron",
    "amd",
    "vastai",
    "biren",
    "vnpus",
)
# `<≥1 char>g.<anything>`, checked by HAMi at start-up.
_MIG_PROFILE = re.compile(r".+g\..*", re.DOTALL)


class DeviceConfigError(ValueError):
    """The device config is unreadable or holds a bad value; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, strict=False)


class MigAllowlistEntry(_Section):
    """GPU models (substrings of the NVML name) and the MIG profiles offered on them."""

    models: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()


class NvidiaConfig(_Section):
    """The `nvidia:` section. Field names are HAMi's YAML keys (camelCase aliases)."""

    resource_count_name: str = Field(default="nvidia.com/gpu", alias="resourceCountName")
    resource_memory_name: str = Field(default="nvidia.com/gpumem", alias="resourceMemoryName")
    resource_memory_percentage_name: str = Field(
        default="nvidia.com/gpumem-percentage", alias="resourceMemoryPercentageName"
    )
    resource_core_name: str = Field(default="nvidia.com/gpucores", alias="resourceCoreName")
    resource_priority_name: str = Field(default="nvidia.com/priority", alias="resourcePriorityName")
    overwrite_env: bool = Field(default=False, alias="overwriteEnv")
    default_memory: int = Field(default=0, alias="defaultMemory")
    default_cores: int = Field(default=0, alias="defaultCores")
    default_gpu_num: int = Field(default=1, alias="defaultGPUNum")
    memory_factor: int = Field(default=1, alias="memoryFactor")
    gpu_core_policy: str = Field(default="default", alias="gpuCorePolicy")
    runtime_class_name: str = Field(default="", alias="runtimeClassName")
    mig_profile_allowlist: tuple[MigAllowlistEntry, ...] = Field(
        default=(), alias="migProfileAllowlist"
    )
    # Device-plugin-only knobs: the scheduler parses and ignores them.
    device_split_count: int = Field(default=10, alias="deviceSplitCount")
    device_memory_scaling: float = Field(default=1.0, alias="deviceMemoryScaling")
    device_core_scaling: float = Field(default=1.0, alias="deviceCoreScaling")
    pre_configured_device_memory: int = Field(default=0, alias="preConfiguredDeviceMemory")
    lib_cuda_log_level: int = Field(default=1, alias="libCudaLogLevel")
    enable_numa_topology: bool = Field(default=False, alias="enableNumaTopology")
    disable_core_limit: bool = Field(default=False, alias="disableCoreLimit")

    @field_validator("mig_profile_allowlist")
    @classmethod
    def _allowlist_is_well_formed(
        cls, entries: tuple[MigAllowlistEntry, ...]
    ) -> tuple[MigAllowlistEntry, ...]:
        for entry in entries:
            if not entry.models or not entry.profiles:
                raise ValueError("MIG profile allowlist must define models and profiles")
            for profile in entry.profiles:
                if not _MIG_PROFILE.fullmatch(profile):
                    raise ValueError(f'invalid MIG profile "{profile}"')
        return entries


class DeviceConfig(_Section):
    """The whole file: the NVIDIA section parsed."""

    nvidia: NvidiaConfig = Field(default_factory=NvidiaConfig)


def parse_device_config(text: str, *, source: str = "device config") -> DeviceConfig:
    """Parse the YAML text of a `device-config.yaml` (`source` names it in errors)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DeviceConfigError(f"{source}: not valid YAML: {err}") from err
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise DeviceConfigError(
            f"{source}: expected a mapping of vendor sections, got {type(document).__name__}"
        )
    sections = {key: value for key, value in document.items() if key in KNOWN_SECTIONS}
    if not any(sections.values()):
        # HAMi's validateConfig: a file in which every vendor section is empty is an error.
        raise DeviceConfigError(
            f"{source}: no vendor section is set (expected one of {', '.join(KNOWN_SECTIONS)})"
        )
    nvidia = sections.pop("nvidia", None) or {}
    if not isinstance(nvidia, dict):
        raise DeviceConfigError(
            f"{source}: nvidia: expected a mapping, got {type(nvidia).__name__}"
        )
    try:
        return DeviceConfig(nvidia=NvidiaConfig.model_validate(nvidia))
    except ValidationError as err:
        raise DeviceConfigError(f"{source}: nvidia: {_describe(err)}") from err


def _describe(err: ValidationError) -> str:
    problems = []
    for problem in err.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "value"
        problems.append(f"{where}: {problem['msg']} (got {problem.get('input')!r})")
    return "; ".join(problems)
