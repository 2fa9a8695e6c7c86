"""The annotation keys of every HAMi vendor backend, as one table.

Irregular spellings are HAMi's and copied exactly: `hami.io/Biren-…` and
`hami.io/Vastai-…` are capitalised, XPU registers under `hami.io/node-register-xpu`,
Ascend under `hami.io/node-register-<cw>`, Iluvatar/Ascend/XPU use `no-use` in the nouse
key, AMD writes `use-gpu-uuid` with a hyphen, Mthreads uses `mthreads.ai/` for selectors.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pyhami.protocol.keys import (
    KEY_NODE_HANDSHAKE,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_NOUSE_GPUTYPE,
    KEY_NVIDIA_NOUSE_GPUUUID,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_NVIDIA_USE_GPUTYPE,
    KEY_NVIDIA_USE_GPUUUID,
    NVIDIA_VENDOR,
)


class RegisterForm(enum.StrEnum):
    JSON = "json"  # a JSON list of devices (NVIDIA and most vendors)
    COLON = "colon"  # `id,count,devmem,...:` per device (Hygon DCU, Iluvatar)
    CAPACITY = "capacity"  # no register annotation; devices come from node.status.capacity
    VENDOR_JSON = "vendor-json"  # the vendor's own JSON shape (Metax-SGPU)


@dataclass(frozen=True, slots=True)
class VendorKeys:
    """One backend's keys; "" where the backend has no such key."""

    vendor: str
    register_form: RegisterForm
    allocated: str
    to_allocate: str = ""
    register: str = ""
    handshake: str = ""
    use_uuid: str = ""
    nouse_uuid: str = ""
    use_type: str = ""
    nouse_type: str = ""
    node_lock: bool = False  # Bind takes hami.io/mutex.lock for this vendor


def _configured(common_word: str, form: RegisterForm, register: str) -> VendorKeys:
    """A backend instantiated per configured common word (Iluvatar, Ascend)."""
    return VendorKeys(
        vendor=common_word,
        register_form=form,
        register=register,
        handshake=f"hami.io/node-handshake-{common_word}",
        to_allocate=f"hami.io/{common_word}-devices-to-allocate",
        allocated=f"hami.io/{common_word}-devices-allocated",
        use_uuid=f"hami.io/use-{common_word}-uuid",
        nouse_uuid=f"hami.io/no-use-{common_word}-uuid",
        node_lock=True,
    )


def iluvatar_keys(common_word: str) -> VendorKeys:
    """Iluvatar, one backend per configured common word such as `MR-V100`."""
    return _configured(common_word, RegisterForm.COLON, f"hami.io/node-{common_word}-register")


def ascend_keys(common_word: str) -> VendorKeys:
    """Ascend, one backend per configured common word such as `Ascend910B3`."""
    return _configured(common_word, RegisterForm.JSON, f"hami.io/node-register-{common_word}")


def _table(*rows: VendorKeys) -> Mapping[str, VendorKeys]:
    return MappingProxyType({row.vendor: row for row in rows})


# The fixed backends; Iluvatar and Ascend depend on configuration (functions above).
VENDORS: Mapping[str, VendorKeys] = _table(
    VendorKeys(
        vendor=NVIDIA_VENDOR,
        register_form=RegisterForm.JSON,
        register=KEY_NODE_NVIDIA_REGISTER,
        handshake=KEY_NODE_HANDSHAKE,
        to_allocate=KEY_NVIDIA_TO_ALLOCATE,
        allocated=KEY_NVIDIA_ALLOCATED,
        use_uuid=KEY_NVIDIA_USE_GPUUUID,
        nouse_uuid=KEY_NVIDIA_NOUSE_GPUUUID,
        use_type=KEY_NVIDIA_USE_GPUTYPE,
        nouse_type=KEY_NVIDIA_NOUSE_GPUTYPE,
        node_lock=True,
    ),
    VendorKeys(
        vendor="AMD",
        register_form=RegisterForm.JSON,
        register="hami.io/node-amd-register",
        to_allocate="hami.io/amd-devices-to-allocate",
        allocated="hami.io/amd-devices-allocated",
        use_uuid="amd.com/use-gpu-uuid",
        nouse_uuid="amd.com/nouse-gpu-uuid",
        use_type="amd.com/use-gputype",
        nouse_type="amd.com/nouse-gputype",
        node_lock=True,
    ),
    VendorKeys(
        vendor="AWSNeuron",
        register_form=RegisterForm.CAPACITY,
        allocated="hami.io/aws-neuron-devices-allocated",
        use_uuid="aws.amazon.com/use-neuron-uuid",
        nouse_uuid="aws.amazon.com/nouse-neuron-uuid",
    ),
    VendorKeys(
        vendor="Biren",
        register_form=RegisterForm.JSON,
        register="hami.io/node-biren-register",
        handshake="hami.io/node-handshake-biren",
        to_allocate="hami.io/Biren-devices-to-allocate",
        allocated="hami.io/Biren-devices-allocated",
        use_uuid="birentech.com/use-gpuuuid",
        nouse_uuid="birentech.com/nouse-gpuuuid",
        node_lock=True,
    ),
    VendorKeys(
        vendor="MLU",
        register_form=RegisterForm.CAPACITY,
        to_allocate="hami.io/cambricon-mlu-devices-to-allocate",
        allocated="hami.io/cambricon-mlu-devices-allocated",
        use_uuid="cambricon.com/use-gpuuuid",
        nouse_uuid="cambricon.com/nouse-gpuuuid",
    ),
    VendorKeys(
        vendor="GCU",
        register_form=RegisterForm.CAPACITY,
        to_allocate="hami.io/enflame-gcu-devices-to-allocate",
        allocated="hami.io/enflame-gcu-devices-allocated",
    ),
    VendorKeys(
        vendor="Enflame",
        register_form=RegisterForm.CAPACITY,
        allocated="hami.io/enflame-vgpu-devices-allocated",
        use_uuid="enflame.com/use-gpuuuid",
        nouse_uuid="enflame.com/nouse-gpuuuid",
    ),
    VendorKeys(
        vendor="DCU",
        register_form=RegisterForm.COLON,
        register="hami.io/node-dcu-register",
        handshake="hami.io/node-handshake-dcu",
        to_allocate="hami.io/dcu-devices-to-allocate",
        allocated="hami.io/dcu-devices-allocated",
        use_uuid="hygon.com/use-gpuuuid",
        nouse_uuid="hygon.com/nouse-gpuuuid",
        use_type="hygon.com/use-dcutype",
        nouse_type="hygon.com/nouse-dcutype",
        node_lock=True,
    ),
    VendorKeys(
        vendor="kunlun",
        register_form=RegisterForm.CAPACITY,
        allocated="hami.io/kunlun-allocated",
        use_uuid="baidu.com/use-gpuuuid",
        nouse_uuid="baidu.com/nouse-gpuuuid",
    ),
    VendorKeys(
        vendor="XPU",
        register_form=RegisterForm.JSON,
        register="hami.io/node-register-xpu",
        handshake="hami.io/node-handshake-xpu",
        to_allocate="hami.io/xpu-devices-to-allocate",
        allocated="hami.io/xpu-devices-allocated",
        # XPU also honours baidu.com/use-gpuuuid and baidu.com/nouse-gpuuuid.
        use_uuid="hami.io/use-xpu-uuid",
        nouse_uuid="hami.io/no-use-xpu-uuid",
        node_lock=True,
    ),
    VendorKeys(
        vendor="Metax-GPU",
        register_form=RegisterForm.CAPACITY,
        to_allocate="hami.io/metax-gpu-devices-to-allocate",
        allocated="hami.io/metax-gpu-devices-allocated",
    ),
    VendorKeys(
        vendor="Metax-SGPU",
        register_form=RegisterForm.VENDOR_JSON,
        register="metax-tech.com/node-gpu-devices",
        to_allocate="hami.io/metax-sgpu-devices-to-allocate",
        allocated="hami.io/metax-sgpu-devices-allocated",
        use_uuid="metax-tech.com/use-gpuuuid",
        nouse_uuid="metax-tech.com/nouse-gpuuuid",
        node_lock=True,
    ),
    VendorKeys(
        vendor="Mthreads",
        register_form=RegisterForm.CAPACITY,
        to_allocate="hami.io/mthreads-vgpu-devices-to-allocate",  # registered, never written
        allocated="hami.io/mthreads-vgpu-devices-allocated",
        use_uuid="mthreads.ai/use-gpuuuid",
        nouse_uuid="mthreads.ai/nouse-gpuuuid",
    ),
    VendorKeys(
        vendor="Vastai",
        register_form=RegisterForm.JSON,
        register="hami.io/node-va-register",
        handshake="hami.io/node-handshake-va",
        to_allocate="hami.io/Vastai-devices-to-allocate",
        allocated="hami.io/Vastai-devices-allocated",
        use_uuid="vastaitech.com/use-gpuuuid",
        nouse_uuid="vastaitech.com/nouse-gpuuuid",
        node_lock=True,
    ),
)


def in_request_checklist(vendors: Mapping[str, VendorKeys] = VENDORS) -> dict[str, str]:
    """HAMi `InRequestDevices`: vendor → to-allocate key, for vendors that have one."""
    return {v.vendor: v.to_allocate for v in vendors.values() if v.to_allocate}


def support_checklist(vendors: Mapping[str, VendorKeys] = VENDORS) -> dict[str, str]:
    """HAMi `SupportDevices`: vendor → allocated key (never erased; rebuilds caches)."""
    return {v.vendor: v.allocated for v in vendors.values()}


# Vendor-specific keys outside the table, spelled as HAMi spells them.
KEY_CAMBRICON_LOCK = "cambricon.com/dsmlu.lock"  # node; RFC 3339 time only, 2 min expiry
KEY_CAMBRICON_ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
KEY_CAMBRICON_PROFILE = "CAMBRICON_DSMLU_PROFILE"
KEY_AWS_NEURON_IDS = "AWS_NEURON_IDS"
KEY_AWS_NEURON_RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
KEY_AWS_NEURON_ALLOC_TIME = "NEURON_ALLOC_TIME"
KEY_AWS_NEURON_ALLOCATED = "NEURON_ALLOCATED"
KEY_AWS_PREDICATE_NODE = "aws.amazon.com/predicate-node"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
KEY_ENFLAME_DRS_CAPACITY = "enflame.com/gcu-drs-capacity"
KEY_ENFLAME_ASSIGNED_CONTAINERS = "assigned-containers"
KEY_ASCEND_PREDICATE_TIME = "predicate-time"
KEY_ASCEND_VNPU_MODE = "huawei.com/vnpu-mode"
KEY_ASCEND_SOFT_SPLIT_NODE = "hami-vnpu-core"
KEY_KUNLUN_DEVICE_IDX = "BAIDU_COM_DEVICE_IDX"
KEY_MTHREADS_GPU_INDEX = "mthreads.com/gpu-index"
KEY_MTHREADS_REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"
KEY_METAX_SGPU_QOS_POLICY = "metax-tech.com/sgpu-qos-policy"
KEY_METAX_SGPU_APP_CLASS = "metax-tech.com/sgpu-app-class"
KEY_METAX_TOPOLOGY_SCORES = "metax-tech.com/gpu.topology.scores"
KEY_METAX_TOPOLOGY_LOSSES = "metax-tech.com/gpu.topology.losses"
KEY_ENFLAME_ASSIGNED = "enflame.com/gcu-assigned"
KEY_ENFLAME_ASSIGNED_TIME = "enflame.com/gcu-assigned-time"  # unix nanoseconds
KEY_ENFLAME_ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
KEY_ENFLAME_ASSIGNED_ID = "enflame.com/gcu-assigned-id"
KEY_ENFLAME_ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
KEY_ENFLAME_REQUEST_SIZE = "enflame.com/gcu-request-size"
KEY_METAX_GPU_DEVICES_ALLOCATED = "metax-tech.com/gpu-devices-allocated"
KEY_METAX_PREDICATE_TIME = "metax-tech.com/predicate-time"  # unix nanoseconds
KEY_METAX_SGPU_TOPOLOGY_AWARE = "metax-tech.com/sgpu-topology-aware"
KEY_MTHREADS_PREDICATE_TIME = "mthreads.com/predicate-time"  # unix nanoseconds
KEY_MTHREADS_PREDICATE_NODE = "mthreads.com/predicate-node"
# Declared by HAMi but never read or written (kept so the key list is complete).
UNUSED_KEYS = (
    "amd.com/gpu-index",
    "amd.com/predicate-node",
    "birentech.com/use-biren",
    "birentech.com/nouse-biren",
    "cambricon.com/use-mlutype",
    "cambricon.com/nouse-mlutype",
    "vastaitech.com/use-va",
    "vastaitech.com/nouse-va",
)


def ascend_device_key(common_word: str) -> str:
    """Ascend's per-pod `huawei.com/<cw>` JSON list of the assigned NPUs."""
    return f"huawei.com/{common_word}"
