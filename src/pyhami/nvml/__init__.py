"""NVML behind a small interface: the real one on nvidia-ml-py, faked in pyhami.testing.

nvml = open_nvml()            # NvmlUnavailableError (with a hint) when there is no driver
try:
    for index in range(nvml.device_count()):
        print(nvml.device_uuid(index), nvml.device_memory(index).total)
finally:
    nvml.close()
"""

from pyhami.nvml.api import (
    GI_PROFILE_ID_COUNT,
    SLICE_PROFILE_IDS,
    GpuInstance,
    GpuInstanceProfile,
    MemoryInfo,
    MigDevice,
    MigMode,
    NvLink,
    Nvml,
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
    XidEvent,
    XidWatch,
)
from pyhami.nvml.real import PynvmlNvml, driver_available, open_nvml

__all__ = [
    "GI_PROFILE_ID_COUNT",
    "SLICE_PROFILE_IDS",
    "GpuInstance",
    "GpuInstanceProfile",
    "MemoryInfo",
    "MigDevice",
    "MigMode",
    "NvLink",
    "Nvml",
    "NvmlError",
    "NvmlNotSupportedError",
    "NvmlUnavailableError",
    "PynvmlNvml",
    "RunningProcess",
    "TopologyLevel",
    "Utilization",
    "XidEvent",
    "XidWatch",
    "driver_available",
    "open_nvml",
]
