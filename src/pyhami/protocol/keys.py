"""Every annotation and label key HAMi v2.10 uses, shared and NVIDIA (vendor tables: `vendors`).

Pod annotations unless the name says node (`KEY_NODE_*`, `KEY_DEVICE_CORDON`) or label
(`LABEL_*`). Values are copied exactly, irregular spellings included.
"""

import enum

# --- shared by all vendors -----------------------------------------------------------------
KEY_VGPU_NODE = "hami.io/vgpu-node"  # pod annotation, and mirrored as a pod label
LABEL_VGPU_NODE = "hami.io/vgpu-node"
KEY_VGPU_TIME = "hami.io/vgpu-time"
KEY_BIND_TIME = "hami.io/bind-time"
KEY_BIND_PHASE = "hami.io/bind-phase"
KEY_NODE_LOCK = "hami.io/mutex.lock"  # node annotation
KEY_NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
KEY_GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
KEY_DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
LABEL_SCHEDULER_ROLE = "hami.io/scheduler-role"  # on hami-scheduler pods

# --- NVIDIA ------------------------------------------------------------------------------
NVIDIA_VENDOR = "NVIDIA"
KEY_NODE_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
KEY_NODE_NVIDIA_SCORE = "hami.io/node-nvidia-score"
KEY_NODE_HANDSHAKE = "hami.io/node-handshake"
KEY_DEVICE_CORDON = "hami.io/device-cordon"  # node annotation
KEY_NVIDIA_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
KEY_NVIDIA_ALLOCATED = "hami.io/vgpu-devices-allocated"
KEY_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
KEY_NVIDIA_USE_GPUTYPE = "nvidia.com/use-gputype"
KEY_NVIDIA_NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
KEY_NVIDIA_USE_GPUUUID = "nvidia.com/use-gpuuuid"
KEY_NVIDIA_NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
KEY_NVIDIA_NUMA_BIND = "nvidia.com/numa-bind"
KEY_NVIDIA_VGPU_MODE = "nvidia.com/vgpu-mode"


class BindPhase(enum.StrEnum):
    """`hami.io/bind-phase`: Bind writes ALLOCATING, the device plugin SUCCESS or FAILED."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


class SchedulerRole(enum.StrEnum):
    """`hami.io/scheduler-role` label values."""

    LEADER = "leader"
    FOLLOWER = "follower"


class DeviceMode(enum.StrEnum):
    """The `mode` a device registers (and `nvidia.com/vgpu-mode` is tested against)."""

    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"


class NodePolicy(enum.StrEnum):
    """`hami.io/node-scheduler-policy` values (default `binpack`)."""

    BINPACK = "binpack"
    SPREAD = "spread"


class GpuPolicy(enum.StrEnum):
    """Names in `hami.io/gpu-scheduler-policy` (default `spread`)."""

    BINPACK = "binpack"
    SPREAD = "spread"
    TOPOLOGY_AWARE = "topology-aware"
    MUTEX = "mutex"
    NUMA = "numa"
