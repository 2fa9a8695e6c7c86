"""PynvmlNvml's dynamic-MIG calls through pynvml's own ctypes wrappers over a fake libnvidia-ml
(in place of `pynvml._nvmlGetFunctionPointer`): it sees the C arguments real NVML would (handles,
out-pointers, caller-owned arrays, counts) and answers NVML return codes, as the C API does."""

import ctypes
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from pyhami.model import MigPlacement
from pyhami.nvml import NvmlError, NvmlNotSupportedError, open_nvml
from pyhami.nvml.api import GpuInstance, GpuInstanceProfile, MigDevice, MigMode, RunningProcess
from pyhami.nvml.real import PynvmlNvml

_CArg = type(ctypes.byref(ctypes.c_uint()))
_OK = pynvml.NVML_SUCCESS


# A GI profile: its NVML profile id (nvidia-smi's number), slices, MiB, SMs, instanceCount
_GiProfile = namedtuple("_GiProfile", "id slices memory_mb sms count name placements")

# An A100-SXM4-80GB: note profile *id* 0 is 7g.80gb, so an enum passed as an id is caught.
PROFILES = {  # by NVML_GPU_INSTANCE_PROFILE_<n>_SLICE enum
    0: _GiProfile(19, 1, 9856, 14, 7, b"MIG 1g.10gb", tuple((s, 1) for s in range(7))),
    1: _GiProfile(14, 2, 19968, 28, 3, b"MIG 2g.20gb", ((0, 2), (2, 2), (4, 2))),
    4: _GiProfile(0, 7, 80000, 98, 1, b"MIG 7g.80gb", ((0, 8),)),
}
BY_ID = {p.id: p for p in PROFILES.values()}
DRIVER_ENUMS = 10  # this "driver" predates GI profile enums >= 10: INVALID_ARGUMENT for them
CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}  # NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE -> n
CI_ID_OFFSET = 10  # on A100 CI profile ids equal the enum; offset here so mixing them up shows


# A live GI: its _GiProfile, placement start and size, and cis: CI id -> CI profile enum
_Gi = namedtuple("_Gi", "profile start size cis")


def _target(ref: Any, ctype: type) -> Any:
    """What a `T *` argument points at; the C side would scribble memory on anything else."""
    assert isinstance(ref, _CArg), f"expected byref({ctype.__name__}), got {ref!r}"
    assert isinstance(ref._obj, ctype), f"expected {ctype.__name__} *, got {ref._obj!r}"
    return ref._obj


def _uint(value: Any) -> int:
    assert type(value) in (int, ctypes.c_uint), f"ctypes cannot pass {value!r} as a uint"
    return value.value if isinstance(value, ctypes.c_uint) else value


def _addr(handle: Any, kind: type) -> int:
    assert isinstance(handle, kind), f"expected {kind.__name__}, got {handle!r}"
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _array(array: Any, ctype: type, need: int) -> None:
    """A caller-owned `T[]` the C side fills: of T, and long enough not to be overrun."""
    assert isinstance(array, ctypes.Array) and array._type_ is ctype, f"not a {ctype} array"
    assert len(array) >= need, f"{ctype.__name__}[{len(array)}] overrun by {need} entries"


def _store(pointer: Any, addr: int) -> None:
    ctypes.c_void_p.from_address(ctypes.addressof(pointer)).value = addr


def _plain(arg: Any) -> Any:
    """An argument as the call log records it."""
    if isinstance(arg, _CArg) and isinstance(arg._obj, pynvml.c_nvmlGpuInstancePlacement_t):
        return ("&placement", arg._obj.start, arg._obj.size)
    if isinstance(arg, _CArg):
        return "&" + type(arg._obj).__name__
    if isinstance(arg, ctypes.Array):
        return (f"{arg._type_.__name__}[]", len(arg))
    if isinstance(arg, ctypes._Pointer):
        return hex(ctypes.cast(arg, ctypes.c_void_p).value or 0)
    if isinstance(arg, ctypes.c_uint | ctypes.c_char_p):
        return arg.value
    return arg


def _need(condition: object, code: int) -> None:
    if not condition:
        raise pynvml.NVMLError(code)


INVAL, NOT_SUPPORTED = pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND, IN_USE = pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_IN_USE
NO_ROOM = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
# the handle addresses the fake hands out: the GPU's, and the bases of GI, CI and MIG devices
GPU, GI_BASE, CI_BASE, MIG_BASE = 0x1000, 0x2000, 0x30000, 0x40000


class _FakeLib:
    """One A100-80GB with dynamic MIG, as libnvidia-ml's C functions behave."""

    def __init__(self) -> None:
        self.current = self.pending = pynvml.NVML_DEVICE_MIG_DISABLE
        self.gis: dict[int, _Gi] = {}
        self.next_gi = 3  # the driver picks GI ids; not 0 so ids differ from list positions
        self.processes: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail: dict[str, int] = {}  # C function -> NVML return code to answer
        self.missing: set[str] = set()  # C functions an old driver lacks

    def lookup(self, name: str) -> Callable[..., int]:
        if name in self.missing or not name.startswith("nvml") or not hasattr(self, name):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def call(*args: Any) -> int:
            self.calls.append((name, tuple(_plain(a) for a in args)))
            if name in self.fail:
                return self.fail[name]
            try:
                getattr(self, name)(*args)
            except pynvml.NVMLError as answer:
                return int(answer.value)
            return _OK

        return call

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]

    def mig_uuid(self, gi: int, ci: int) -> str:
        return f"MIG-a100fake-{gi:02d}{ci:02d}"

    def _migs(self) -> list[tuple[int, int]]:
        return [(g, c) for g in sorted(self.gis) for c in sorted(self.gis[g].cis)]

    def _gi(self, handle: Any) -> tuple[int, _Gi]:
        gi_id = _addr(handle, pynvml.c_nvmlGpuInstance_t) - GI_BASE
        _need(gi_id in self.gis, INVAL)
        return gi_id, self.gis[gi_id]

    def _ci(self, handle: Any) -> tuple[int, int]:
        key = divmod(_addr(handle, pynvml.c_nvmlComputeInstance_t) - CI_BASE, 0x100)
        _need(key in self._migs(), INVAL)
        return key

    def _device(self, handle: Any) -> tuple[int, int] | None:  # None: the GPU itself
        if (addr := _addr(handle, pynvml.c_nvmlDevice_t)) == GPU:
            return None
        _need((key := divmod(addr - MIG_BASE, 0x100)) in self._migs(), INVAL)
        return key

    def _mig_gpu(self, handle: Any) -> None:
        _need(self._device(handle) is None, INVAL)
        _need(self.current == pynvml.NVML_DEVICE_MIG_ENABLE, NOT_SUPPORTED)

    def _profile(self, profile_id: Any) -> _GiProfile:
        _need(_uint(profile_id) in BY_ID, NOT_SUPPORTED)  # not a profile of this GPU
        return BY_ID[_uint(profile_id)]

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> None:
        _store(_target(out, pynvml.c_nvmlDevice_t), GPU if _uint(index) == 0 else 0)

    def nvmlDeviceGetMigMode(self, dev: Any, current: Any, pending: Any) -> None:
        assert self._device(dev) is None
        _target(current, ctypes.c_uint).value = self.current
        _target(pending, ctypes.c_uint).value = self.pending

    def nvmlDeviceSetMigMode(self, dev: Any, mode: Any, status: Any) -> None:
        assert self._device(dev) is None
        _need(_uint(mode) in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE), INVAL)
        self.pending = _uint(mode)  # in effect after the next GPU reset
        _target(status, ctypes.c_uint).value = _OK

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, dev: Any, profile: Any, out: Any) -> None:
        info = _target(out, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)
        _need(info.version == pynvml.nvmlGpuInstanceProfileInfo_v2, VERSION_MISMATCH)
        self._mig_gpu(dev)
        _need(_uint(profile) < DRIVER_ENUMS, INVAL)
        _need(_uint(profile) in PROFILES, NOT_SUPPORTED)
        p = PROFILES[_uint(profile)]
        info.id, info.sliceCount, info.instanceCount = p.id, p.slices, p.count
        info.multiprocessorCount, info.memorySizeMB, info.name = p.sms, p.memory_mb, p.name

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, dev: Any, profile_id: Any, out: Any, count: Any
    ) -> None:
        self._mig_gpu(dev)
        p = self._profile(profile_id)
        counter = _target(count, ctypes.c_uint)
        if out is not None:  # NULL asks for the count only
            _array(out, pynvml.c_nvmlGpuInstancePlacement_t, len(p.placements))
            for slot, (start, size) in zip(out, p.placements, strict=False):
                slot.start, slot.size = start, size
        counter.value = len(p.placements)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, dev: Any, profile_id: Any, placement: Any, out: Any
    ) -> None:
        self._mig_gpu(dev)
        wanted = _target(placement, pynvml.c_nvmlGpuInstancePlacement_t)
        handle = _target(out, pynvml.c_nvmlGpuInstance_t)
        p = self._profile(profile_id)
        start, size = wanted.start, wanted.size
        _need((start, size) in p.placements, INVAL)
        taken = {s for gi in self.gis.values() for s in range(gi.start, gi.start + gi.size)}
        _need(not taken & set(range(start, start + size)), NO_ROOM)
        gi_id, self.next_gi = self.next_gi, self.next_gi + 1
        self.gis[gi_id] = _Gi(p, start, size, {})
        _store(handle, GI_BASE + gi_id)

    def nvmlDeviceGetGpuInstances(self, dev: Any, profile_id: Any, out: Any, count: Any) -> None:
        self._mig_gpu(dev)
        p = self._profile(profile_id)
        _array(out, pynvml.c_nvmlGpuInstance_t, p.count)  # room for instanceCount handles
        ids = sorted(i for i, gi in self.gis.items() if gi.profile is p)
        for slot, gi_id in enumerate(ids):
            out[slot] = ctypes.cast(GI_BASE + gi_id, pynvml.c_nvmlGpuInstance_t)
        _target(count, ctypes.c_uint).value = len(ids)

    def nvmlDeviceGetGpuInstanceById(self, dev: Any, gi_id: Any, out: Any) -> None:
        self._mig_gpu(dev)
        _need(_uint(gi_id) in self.gis, NOT_FOUND)
        _store(_target(out, pynvml.c_nvmlGpuInstance_t), GI_BASE + _uint(gi_id))

    def nvmlGpuInstanceGetInfo(self, handle: Any, out: Any) -> None:
        info = _target(out, pynvml.c_nvmlGpuInstanceInfo_t)
        gi_id, gi = self._gi(handle)
        info.id, info.profileId = gi_id, gi.profile.id
        info.placement.start, info.placement.size = gi.start, gi.size

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, handle: Any, profile: Any, engines: Any, out: Any
    ) -> None:
        info = _target(out, pynvml.c_nvmlComputeInstanceProfileInfo_v2_t)
        _need(info.version == pynvml.nvmlComputeInstanceProfileInfo_v2, VERSION_MISMATCH)
        _, gi = self._gi(handle)
        _need(_uint(engines) == pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NOT_SUPPORTED)
        _need(CI_SLICES.get(_uint(profile), 99) <= gi.profile.slices, NOT_SUPPORTED)
        slices = CI_SLICES[_uint(profile)]
        info.id, info.sliceCount = _uint(profile) + CI_ID_OFFSET, slices
        info.instanceCount, info.multiprocessorCount = gi.profile.slices // slices, 14 * slices
        info.name = b"MIG %dc.%s" % (slices, gi.profile.name.removeprefix(b"MIG "))

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, ci_id: Any, out: Any) -> None:
        ci = _target(out, pynvml.c_nvmlComputeInstance_t)
        gi_id, gi = self._gi(handle)
        _need((enum := _uint(ci_id) - CI_ID_OFFSET) in CI_SLICES, INVAL)
        used = sum(CI_SLICES[e] for e in gi.cis.values()) + CI_SLICES[enum]
        _need(used <= gi.profile.slices, NO_ROOM)
        new = min(set(range(8)) - set(gi.cis))
        gi.cis[new] = enum
        _store(ci, CI_BASE + gi_id * 0x100 + new)

    def nvmlComputeInstanceGetInfo_v2(self, handle: Any, out: Any) -> None:
        info = _target(out, pynvml.c_nvmlComputeInstanceInfo_t)
        gi_id, ci_id = self._ci(handle)
        _store(info.gpuInstance, GI_BASE + gi_id)
        info.id, info.profileId = ci_id, self.gis[gi_id].cis[ci_id] + CI_ID_OFFSET

    def nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci_id: Any, out: Any) -> None:
        ci = _target(out, pynvml.c_nvmlComputeInstance_t)
        gi_id, gi = self._gi(handle)
        _need(_uint(ci_id) in gi.cis, NOT_FOUND)
        _store(ci, CI_BASE + gi_id * 0x100 + _uint(ci_id))

    def nvmlComputeInstanceDestroy(self, handle: Any) -> None:
        gi_id, ci_id = self._ci(handle)
        _need(not self.processes.get((gi_id, ci_id)), IN_USE)
        del self.gis[gi_id].cis[ci_id]

    def nvmlGpuInstanceDestroy(self, handle: Any) -> None:
        gi_id, gi = self._gi(handle)
        _need(not gi.cis, IN_USE)
        del self.gis[gi_id]

    def nvmlDeviceGetMaxMigDeviceCount(self, dev: Any, count: Any) -> None:
        assert self._device(dev) is None
        _target(count, ctypes.c_uint).value = 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, dev: Any, index: Any, out: Any) -> None:
        assert self._device(dev) is None
        mig = _target(out, pynvml.c_nvmlDevice_t)
        _need(_uint(index) < 7, INVAL)
        _need(_uint(index) < len(migs := self._migs()), NOT_FOUND)
        gi_id, ci_id = migs[_uint(index)]
        _store(mig, MIG_BASE + gi_id * 0x100 + ci_id)

    def nvmlDeviceGetUUID(self, dev: Any, buffer: Any, size: Any) -> None:
        assert isinstance(buffer, ctypes.Array) and buffer._type_ is ctypes.c_char
        key = self._device(dev)
        uuid = self.mig_uuid(*key).encode() if key else b"GPU-a100fake"
        _need(len(uuid) < _uint(size) <= len(buffer), INSUFFICIENT_SIZE)
        buffer.value = uuid

    def nvmlDeviceGetGpuInstanceId(self, dev: Any, out: Any) -> None:
        _need(key := self._device(dev), NOT_SUPPORTED)  # not a MIG device handle
        _target(out, ctypes.c_uint).value = key[0]

    def nvmlDeviceGetComputeInstanceId(self, dev: Any, out: Any) -> None:
        _need(key := self._device(dev), NOT_SUPPORTED)
        _target(out, ctypes.c_uint).value = key[1]

    def nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> None:
        assert isinstance(uuid, ctypes.c_char_p)
        found = [k for k in self._migs() if uuid.value == self.mig_uuid(*k).encode()]
        _need(found, NOT_FOUND)
        _store(_target(out, pynvml.c_nvmlDevice_t), MIG_BASE + found[0][0] * 0x100 + found[0][1])

    def nvmlDeviceGetComputeRunningProcesses_v3(self, dev: Any, count: Any, out: Any) -> None:
        counter = _target(count, ctypes.c_uint)
        key = self._device(dev)
        procs = self.processes.get(key, []) if key else []
        room, counter.value = counter.value, len(procs)
        _need(not procs or (out is not None and room >= len(procs)), INSUFFICIENT_SIZE)
        if procs:
            _array(out, pynvml.c_nvmlProcessInfo_v3_t, len(procs))
        for slot, (pid, used) in zip(out or (), procs, strict=False):
            slot.pid, slot.usedGpuMemory = pid, used
            slot.gpuInstanceId, slot.computeInstanceId = key

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, dev: Any, count: Any, out: Any) -> None:
        _target(count, ctypes.c_uint).value = 0  # no graphics on a MIG device


def _fails(kind: type[NvmlError], code: int, call: Callable[..., object], *args: Any) -> NvmlError:
    """The error `call(*args)` raises: exactly of `kind`, with NVML's `code`."""
    with pytest.raises(kind) as caught:
        call(*args)
    assert type(caught.value) is kind and caught.value.code == code
    return caught.value


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> _FakeLib:
    fake = _FakeLib()
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)  # would dlopen the real library
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", fake.lookup)
    fake.current = fake.pending = pynvml.NVML_DEVICE_MIG_ENABLE
    return fake


@pytest.fixture
def nvml(lib: _FakeLib, tmp_path: Path) -> PynvmlNvml:
    return open_nvml(sys_root=tmp_path)


def test_mig_mode_is_pending_until_reset(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    lib.current = lib.pending = pynvml.NVML_DEVICE_MIG_DISABLE
    assert nvml.mig_mode(0) == MigMode(current=False, pending=False)
    nvml.set_mig_mode(0, True)
    assert lib.args("nvmlDeviceSetMigMode")[-1][1] == pynvml.NVML_DEVICE_MIG_ENABLE
    assert nvml.mig_mode(0) == MigMode(current=False, pending=True)
    lib.current = lib.pending  # the GPU reset
    assert nvml.mig_mode(0) == MigMode(current=True, pending=True)
    nvml.set_mig_mode(0, False)
    assert lib.args("nvmlDeviceSetMigMode")[-1][1] == pynvml.NVML_DEVICE_MIG_DISABLE
    assert nvml.mig_mode(0) == MigMode(current=True, pending=False)
    nvml.close()


def test_gi_profile_keeps_enum_and_nvml_id(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    one = GpuInstanceProfile(0, 19, 1, 9856, sm_count=14, instance_count=7, name="1g.10gb")
    assert nvml.gpu_instance_profile(0, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE) == one
    two = nvml.gpu_instance_profile(0, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    assert (two.profile_id, two.id, two.slice_count, two.name) == (1, 14, 2, "2g.20gb")
    assert [args[1] for args in lib.args("nvmlDeviceGetGpuInstanceProfileInfoV")] == [0, 1]
    profile = nvml.gpu_instance_profile
    _fails(NvmlNotSupportedError, NOT_SUPPORTED, profile, 0, 2)  # no 3g.40gb on this fake
    _fails(NvmlNotSupportedError, INVAL, profile, 0, 12)  # an enum newer than the driver


def test_placements_by_profile_id(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    assert nvml.gpu_instance_placements(0, 19) == tuple(MigPlacement(s, 1) for s in range(7))
    assert nvml.gpu_instance_placements(0, 14) == tuple(MigPlacement(s, 2) for s in (0, 2, 4))
    assert nvml.gpu_instance_placements(0, 0) == (MigPlacement(0, 8),)  # id 0 is 7g.80gb
    args = lib.args("nvmlDeviceGetGpuInstancePossiblePlacements_v2")
    assert [a[1] for a in args] == [19, 14, 0]
    assert args[0][2][0] == "c_nvmlGpuInstancePlacement_t[]" and args[0][3] == "&c_uint"
    lib.current = pynvml.NVML_DEVICE_MIG_DISABLE
    _fails(NvmlNotSupportedError, NOT_SUPPORTED, nvml.gpu_instance_placements, 0, 19)


def test_create_gpu_instance_at_placement(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    made = nvml.create_gpu_instance(0, 14, MigPlacement(2, 2))
    assert made == GpuInstance(id=3, profile_id=14, placement=MigPlacement(2, 2))
    (args,) = lib.args("nvmlDeviceCreateGpuInstanceWithPlacement")
    assert args == (hex(GPU), 14, ("&placement", 2, 2), "&LP_struct_c_nvmlGpuInstance_t")
    assert (lib.gis[3].profile.id, lib.gis[3].start) == (14, 2)
    overlap = _fails(NvmlError, NO_ROOM, nvml.create_gpu_instance, 0, 19, MigPlacement(3, 1))
    assert overlap.operation == "nvmlDeviceCreateGpuInstanceWithPlacement"
    _fails(NvmlError, INVAL, nvml.create_gpu_instance, 0, 14, MigPlacement(1, 2))
    assert list(lib.gis) == [3]


def test_gpu_instances_of_every_profile(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    wanted = [(19, MigPlacement(0, 1)), (14, MigPlacement(2, 2)), (19, MigPlacement(6, 1))]
    made = [nvml.create_gpu_instance(0, pid, where) for pid, where in wanted]
    assert sorted(nvml.gpu_instances(0), key=lambda gi: gi.id) == made
    # walked by profile *id*, with room for each profile's instanceCount handles
    walked = [(a[1], a[2]) for a in lib.args("nvmlDeviceGetGpuInstances")]
    assert walked == [
        (i, ("LP_struct_c_nvmlGpuInstance_t[]", n)) for i, n in ((19, 7), (14, 3), (0, 1))
    ]


def test_create_compute_instance_by_ci_profile_id(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    gi = nvml.create_gpu_instance(0, 14, MigPlacement(4, 2))
    device = nvml.create_compute_instance(0, gi.id, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
    assert device == MigDevice(lib.mig_uuid(3, 0), gpu_instance_id=3, compute_instance_id=0)
    (lookup,) = lib.args("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
    assert lookup[1:3] == (1, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    (created,) = lib.args("nvmlGpuInstanceCreateComputeInstance")
    assert created[1] == 1 + CI_ID_OFFSET  # NVML's CI profile id from the info, not the enum
    assert lib.gis[gi.id].cis == {0: 1}
    create = nvml.create_compute_instance
    _fails(NvmlNotSupportedError, NOT_SUPPORTED, create, 0, gi.id, 4)  # 7 slices in a 2g GI
    _fails(NvmlError, NO_ROOM, create, 0, gi.id, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    _fails(NvmlError, NOT_FOUND, create, 0, 99, 0)


def test_mig_devices_read_every_slot(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    assert nvml.mig_devices(0) == ()
    two = nvml.create_gpu_instance(0, 14, MigPlacement(0, 2))
    one = nvml.create_gpu_instance(0, 19, MigPlacement(5, 1))
    made = [nvml.create_compute_instance(0, gi.id, 0) for gi in (two, two, one)]
    assert made[1] == MigDevice(lib.mig_uuid(3, 1), 3, 1)  # the second CI of GI 3
    assert nvml.mig_devices(0) == tuple(made)
    assert [(d.gpu_instance_id, d.compute_instance_id) for d in made] == [(3, 0), (3, 1), (4, 0)]
    slots = [a[1] for a in lib.args("nvmlDeviceGetMigDeviceHandleByIndex")[-7:]]
    assert slots == list(range(7))  # every slot up to the maximum count, empty ones skipped
    lib.fail["nvmlDeviceGetMigDeviceHandleByIndex"] = pynvml.NVML_ERROR_GPU_IS_LOST
    lost = _fails(NvmlError, pynvml.NVML_ERROR_GPU_IS_LOST, nvml.mig_devices, 0)
    assert lost.operation == "nvmlDeviceGetMigDeviceHandleByIndex"


def test_destroy_compute_then_gpu_instance(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    gi = nvml.create_gpu_instance(0, 19, MigPlacement(1, 1))
    other = nvml.create_gpu_instance(0, 19, MigPlacement(2, 1))
    kept = nvml.create_compute_instance(0, other.id, 0)
    device = nvml.create_compute_instance(0, gi.id, 0)
    _fails(NvmlError, IN_USE, nvml.destroy_gpu_instance, 0, gi.id)
    nvml.destroy_compute_instance(0, gi.id, device.compute_instance_id)
    assert lib.gis[gi.id].cis == {}
    assert nvml.mig_devices(0) == (kept,)
    nvml.destroy_gpu_instance(0, gi.id)
    assert list(lib.gis) == [kept.gpu_instance_id]
    assert [i.id for i in nvml.gpu_instances(0)] == [kept.gpu_instance_id]
    gone = _fails(NvmlError, NOT_FOUND, nvml.destroy_gpu_instance, 0, gi.id)
    assert gone.operation == "nvmlDeviceGetGpuInstanceById"
    _fails(NvmlError, NOT_FOUND, nvml.destroy_compute_instance, 0, kept.gpu_instance_id, 5)


def test_mig_device_processes_by_uuid(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    gi = nvml.create_gpu_instance(0, 14, MigPlacement(0, 2))
    device = nvml.create_compute_instance(0, gi.id, 1)
    unknown = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    lib.processes[(gi.id, 0)] = [(41, 3 << 30), (42, unknown)]
    found = nvml.mig_device_processes(0, device.uuid)
    assert found == (RunningProcess(pid=41, used_memory=3 << 30), RunningProcess(42, 0))
    assert lib.args("nvmlDeviceGetHandleByUUID")[0][0] == device.uuid.encode()
    _fails(NvmlError, NOT_FOUND, nvml.mig_device_processes, 0, "MIG-nonesuch")


def test_refusals_and_old_drivers_map_to_our_errors(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    lib.fail["nvmlDeviceSetMigMode"] = pynvml.NVML_ERROR_NO_PERMISSION
    denied = _fails(NvmlError, pynvml.NVML_ERROR_NO_PERMISSION, nvml.set_mig_mode, 0, True)
    assert denied.operation == "nvmlDeviceSetMigMode"
    lib.missing.add("nvmlDeviceCreateGpuInstanceWithPlacement")  # a driver older than placements
    old = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    _fails(NvmlNotSupportedError, old, nvml.create_gpu_instance, 0, 19, MigPlacement(0, 1))
    assert lib.gis == {}


def test_an_unreadable_new_ci_is_destroyed(lib: _FakeLib, nvml: PynvmlNvml) -> None:
    gi = nvml.create_gpu_instance(0, 19, MigPlacement(0, 1))
    lib.fail["nvmlComputeInstanceGetInfo_v2"] = pynvml.NVML_ERROR_UNKNOWN
    _fails(NvmlError, pynvml.NVML_ERROR_UNKNOWN, nvml.create_compute_instance, 0, gi.id, 0)
    assert lib.gis[gi.id].cis == {}
