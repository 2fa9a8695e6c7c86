"""The annotation keys of HAMi's fixed vendor backends, as one table.

pyhami schedules NVIDIA only; the other rows are there because something reads them: the
webhook guards every vendor's allocation keys (`scheduler/ownership.py`) and `pyhami
annotations` decodes every key in the table. Keys only another vendor's own backend would use
are not carried (docs/hami-compatibility.md, "Other vendors' keys").

Irregular spellings are HAMi's and copied exactly: `hami.io/Biren-…` and
`hami.io/Vastai-…` are capitalised, XPU registers under `hami.io/node-register-xpu` and uses
`no-use` in the nouse key, AMD writes `use-gpu-uuid` with a hyphen, Mthreads uses
`mthreads.ai/` for selectors.
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


def _table(*rows: VendorKeys) -> Mapping[str, VendorKeys]:
    return MappingProxyType({row.vendor: row for row in rows})


# The fixed backends (Iluvatar and Ascend, named by configuration, are not carried).
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
    ),
)
