"""The environment variables that control libvgpu, in one list.

libvgpu reads its limits from the container's environment (native/libvgpu/README.md,
"Configuration"), and the device plugin drops the `ld.so.preload` mount for a container whose
spec sets `CUDA_DISABLE_CONTROL`. A pod author who sets any of them could lift or weaken the
limits the scheduler booked, so the webhook refuses them (unless the operator allows it for the
namespace) and the device plugin writes the limits itself.
"""

import re

from pyhami.devices.quantity import parse_quantity, value_ceil
from pyhami.model import ContainerView

MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"  # also MEMORY_LIMIT_<i>
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"  # also SM_LIMIT_<i>
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
CORE_POLICY = "GPU_CORE_UTILIZATION_POLICY"
TASK_PRIORITY = "CUDA_TASK_PRIORITY"
OVERSUBSCRIBE = "CUDA_OVERSUBSCRIBE"
LOG_LEVEL = "LIBCUDA_LOG_LEVEL"
DISABLE_CONTROL = "CUDA_DISABLE_CONTROL"  # read by the device plugin: no ld.so.preload mount

_EXACT = frozenset(
    {SHARED_CACHE, CORE_POLICY, TASK_PRIORITY, OVERSUBSCRIBE, LOG_LEVEL, DISABLE_CONTROL}
)
_PER_DEVICE = re.compile(rf"(?:{MEMORY_LIMIT}|{SM_LIMIT})(?:_[0-9]+)?")

# libvgpu's priority when none is set: the lower of HAMi's two (0 is high, 1 is low).
DEFAULT_TASK_PRIORITY = "1"

# Go strconv.ParseBool's spellings of true (how HAMi reads CUDA_DISABLE_CONTROL).
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def controls_libvgpu(name: str) -> bool:
    """Whether an environment variable of this name changes what libvgpu enforces."""
    return name in _EXACT or _PER_DEVICE.fullmatch(name) is not None


def disables_control(container: ContainerView) -> bool:
    """The container's spec sets CUDA_DISABLE_CONTROL to a Go-true value."""
    return any(name == DISABLE_CONTROL and str(value) in _GO_TRUE for name, value in container.env)


def derived_env(
    container: ContainerView, *, priority_resource: str, core_policy: str
) -> dict[str, str]:
    """The libvgpu settings pyhami derives itself for a GPU container: `CUDA_TASK_PRIORITY`
    from the container's priority resource limit (a value it asked and was admitted for), and
    the configured core policy when it is not the default. A malformed priority raises
    `QuantityError`."""
    env: dict[str, str] = {}
    limits = container.limits
    if priority_resource and priority_resource in limits:
        env[TASK_PRIORITY] = str(value_ceil(parse_quantity(limits[priority_resource])))
    if core_policy not in ("", "default"):
        env[CORE_POLICY] = core_policy
    return env
