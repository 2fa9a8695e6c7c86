"""The HAMi v2.10 annotation protocol: every key, and a total codec for every value format.

Pure (no I/O, no clock: times are passed in). Every decoder raises only `ProtocolError`,
whose message names the field and the bad value. Module per format:

* `keys`, `vendors` - annotation/label keys and value enums; per-vendor key table;
* `register_json`, `register_legacy`, `register` - node device register (JSON and colon forms);
* `pair_scores`, `pod_devices` (to-allocate / allocated), `allocation_record` (the DRA
  driver's per-container record for the monitor), `mig`, `node_lock`, `handshake`,
  `bookkeeping` + `times`, `selectors` + `weights` (selection and policy annotations),
  `reasons` (filter failure reasons);
* `goparse`, `gojson`, `arithmetic` - Go's strconv / encoding/json / int32 behaviour the formats
  and HAMi's device arithmetic depend on.

Decisions: pyhami encodes pod devices with one segment per pod container, init containers
first (see `pod_devices`); encoders refuse values the wire cannot carry. docs/protocol.md
lists every format and its codec; docs/hami-compatibility.md, what is kept and what differs.
"""

from pyhami.protocol.allocation_record import (
    RECORD_FILE_NAME,
    decode_allocation_record,
    encode_allocation_record,
)
from pyhami.protocol.bookkeeping import filter_annotations, parse_bind_phase
from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.handshake import Handshake, format_handshake_request, parse_handshake
from pyhami.protocol.keys import (
    KEY_BIND_PHASE,
    KEY_BIND_TIME,
    KEY_DEVICE_CORDON,
    KEY_DEVICE_SCORING_WEIGHTS,
    KEY_GPU_SCHEDULER_POLICY,
    KEY_MIG_ALLOCATIONS,
    KEY_NODE_HANDSHAKE,
    KEY_NODE_LOCK,
    KEY_NODE_NVIDIA_REGISTER,
    KEY_NODE_NVIDIA_SCORE,
    KEY_NODE_SCHEDULER_POLICY,
    KEY_NVIDIA_ALLOCATED,
    KEY_NVIDIA_NOUSE_GPUTYPE,
    KEY_NVIDIA_NOUSE_GPUUUID,
    KEY_NVIDIA_NUMA_BIND,
    KEY_NVIDIA_TO_ALLOCATE,
    KEY_NVIDIA_USE_GPUTYPE,
    KEY_NVIDIA_USE_GPUUUID,
    KEY_NVIDIA_VGPU_MODE,
    KEY_VGPU_NODE,
    KEY_VGPU_TIME,
    LABEL_SCHEDULER_ROLE,
    LABEL_VGPU_NODE,
    NVIDIA_VENDOR,
    BindPhase,
    DeviceMode,
    GpuPolicy,
    NodePolicy,
    SchedulerRole,
)
from pyhami.protocol.mig import decode_mig_allocations, encode_mig_allocations
from pyhami.protocol.node_lock import (
    NodeLock,
    format_node_lock,
    is_expired,
    owner_suffix,
    parse_node_lock,
)
from pyhami.protocol.pair_scores import decode_pair_scores, encode_pair_scores
from pyhami.protocol.pod_devices import (
    decode_container_devices,
    decode_pod_single_device,
    encode_container_devices,
    encode_pod_single_device,
)
from pyhami.protocol.reasons import Reason, ReasonCount, format_reasons, parse_reasons
from pyhami.protocol.register import decode_node_devices
from pyhami.protocol.register_json import decode_node_devices_json, encode_node_devices
from pyhami.protocol.register_legacy import (
    decode_node_devices_legacy,
    encode_node_devices_legacy,
)
from pyhami.protocol.selectors import (
    TypeSelector,
    UuidSelector,
    parse_device_cordon,
    parse_numa_bind,
    parse_type_selector,
    parse_uuid_selector,
    policy_contains,
    split_list,
    vgpu_mode_accepts,
)
from pyhami.protocol.times import (
    format_rfc3339,
    format_unix_seconds,
    format_wall_clock,
    parse_rfc3339,
    parse_unix_seconds,
    parse_wall_clock,
)
from pyhami.protocol.vendors import (
    VENDORS,
    RegisterForm,
    VendorKeys,
)
from pyhami.protocol.weights import (
    DeviceScoringWeights,
    format_device_scoring_weights,
    parse_device_scoring_weights,
)

__all__ = [
    "KEY_BIND_PHASE",
    "KEY_BIND_TIME",
    "KEY_DEVICE_CORDON",
    "KEY_DEVICE_SCORING_WEIGHTS",
    "KEY_GPU_SCHEDULER_POLICY",
    "KEY_MIG_ALLOCATIONS",
    "KEY_NODE_HANDSHAKE",
    "KEY_NODE_LOCK",
    "KEY_NODE_NVIDIA_REGISTER",
    "KEY_NODE_NVIDIA_SCORE",
    "KEY_NODE_SCHEDULER_POLICY",
    "KEY_NVIDIA_ALLOCATED",
    "KEY_NVIDIA_NOUSE_GPUTYPE",
    "KEY_NVIDIA_NOUSE_GPUUUID",
    "KEY_NVIDIA_NUMA_BIND",
    "KEY_NVIDIA_TO_ALLOCATE",
    "KEY_NVIDIA_USE_GPUTYPE",
    "KEY_NVIDIA_USE_GPUUUID",
    "KEY_NVIDIA_VGPU_MODE",
    "KEY_VGPU_NODE",
    "KEY_VGPU_TIME",
    "LABEL_SCHEDULER_ROLE",
    "LABEL_VGPU_NODE",
    "NVIDIA_VENDOR",
    "RECORD_FILE_NAME",
    "VENDORS",
    "BindPhase",
    "DeviceMode",
    "DeviceScoringWeights",
    "GpuPolicy",
    "Handshake",
    "NodeLock",
    "NodePolicy",
    "ProtocolError",
    "Reason",
    "ReasonCount",
    "RegisterForm",
    "SchedulerRole",
    "TypeSelector",
    "UuidSelector",
    "VendorKeys",
    "decode_allocation_record",
    "decode_container_devices",
    "decode_mig_allocations",
    "decode_node_devices",
    "decode_node_devices_json",
    "decode_node_devices_legacy",
    "decode_pair_scores",
    "decode_pod_single_device",
    "encode_allocation_record",
    "encode_container_devices",
    "encode_mig_allocations",
    "encode_node_devices",
    "encode_node_devices_legacy",
    "encode_pair_scores",
    "encode_pod_single_device",
    "filter_annotations",
    "format_device_scoring_weights",
    "format_handshake_request",
    "format_node_lock",
    "format_reasons",
    "format_rfc3339",
    "format_unix_seconds",
    "format_wall_clock",
    "is_expired",
    "owner_suffix",
    "parse_bind_phase",
    "parse_device_cordon",
    "parse_device_scoring_weights",
    "parse_handshake",
    "parse_node_lock",
    "parse_numa_bind",
    "parse_reasons",
    "parse_rfc3339",
    "parse_type_selector",
    "parse_unix_seconds",
    "parse_uuid_selector",
    "parse_wall_clock",
    "policy_contains",
    "split_list",
    "vgpu_mode_accepts",
]
