"""FakeNVML's MIG model: real profile tables, slices that really occupy, NVML's refusals."""

from collections.abc import Callable

import pytest

from pyhami.model import MigPlacement
from pyhami.nvml import MigMode, NvmlError, NvmlNotSupportedError, RunningProcess
from pyhami.testing.fake_nvml import (
    MIG_OPERATIONS,
    FakeGpu,
    FakeNVML,
    a100_40g,
    a100_80g,
    h100_80g,
    mig_profiles,
    v100_32g,
)

# Profile enums (GI and CI profiles share them), for profile info and compute instances.
ONE_SLICE, TWO_SLICE, THREE_SLICE, SEVEN_SLICE = 0, 1, 2, 4
# NVML's GI profile ids (nvidia-smi's), for placements and GI creation.
GI_1G_ME, GI_1G_DOUBLE, GI_2G, GI_3G, GI_7G = 20, 15, 14, 9, 0


def test_profile_tables_distinguish_same_slice_count_profiles() -> None:
    names = [p.name for p in mig_profiles("NVIDIA H100 80GB HBM3")]
    assert names[:3] == ["1g.10gb", "1g.10gb+me", "1g.20gb"]
    one_g = {
        p.name: p.info for p in mig_profiles("NVIDIA H100 80GB HBM3") if p.info.slice_count == 1
    }
    assert one_g["1g.20gb"].memory_mib > one_g["1g.10gb"].memory_mib
    assert len({info.profile_id for info in one_g.values()}) == 3
    assert mig_profiles("Tesla V100-PCIE-32GB") == ()


@pytest.mark.parametrize(
    ("gpu", "full_name", "full_memory"),
    [(a100_40g, "7g.40gb", 40448), (a100_80g, "7g.80gb", 80640), (h100_80g, "7g.80gb", 81152)],
)
def test_full_profile_fits_the_card(
    gpu: Callable[..., FakeGpu], full_name: str, full_memory: int
) -> None:
    card = gpu(mig=True)
    nvml = FakeNVML.with_gpus(card)
    info = nvml.gpu_instance_profile(0, SEVEN_SLICE)
    assert (info.slice_count, info.memory_mib, info.instance_count) == (7, full_memory, 1)
    assert info.id == GI_7G and info.memory_mib <= (card.memory_total_mib or 0)
    assert full_name in [p.name for p in mig_profiles(card.name)]
    assert nvml.gpu_instance_placements(0, GI_7G) == (MigPlacement(0, 8),)


def test_profile_queries_need_mig_mode_and_a_mig_card() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), v100_32g())
    assert nvml.mig_mode(0) == MigMode(current=False, pending=False)
    with pytest.raises(NvmlNotSupportedError, match="MIG mode is disabled"):
        nvml.gpu_instance_profile(0, ONE_SLICE)
    with pytest.raises(NvmlNotSupportedError, match="has no MIG"):
        nvml.mig_mode(1)
    nvml.set_mig_mode(0, True)
    assert nvml.mig_mode(0) == MigMode(current=True, pending=True)
    assert nvml.gpu_instance_profile(0, TWO_SLICE).instance_count == 3


def test_pending_mode_change_waits_for_a_reset() -> None:
    nvml = FakeNVML.with_gpus(a100_80g())
    nvml.hold_mig_mode_pending(0)
    nvml.set_mig_mode(0, True)
    assert nvml.mig_mode(0) == MigMode(current=False, pending=True)


def test_placements_occupy_slices_and_overlaps_fail() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(mig=True))
    three = nvml.create_gpu_instance(0, GI_3G, MigPlacement(4, 4))
    with pytest.raises(NvmlError, match="Insufficient Resources") as overlap:
        nvml.create_gpu_instance(0, GI_2G, MigPlacement(4, 2))
    assert overlap.value.code == 23
    two = nvml.create_gpu_instance(0, GI_2G, MigPlacement(2, 2))
    with pytest.raises(NvmlError, match="Invalid Argument") as bad:
        nvml.create_gpu_instance(0, GI_2G, MigPlacement(1, 2))
    assert bad.value.code == 2
    assert three.id != two.id
    assert {gi.placement for gi in nvml.gpu_instances(0)} == {
        MigPlacement(4, 4),
        MigPlacement(2, 2),
    }


def test_instance_count_limits_the_media_engine_profile() -> None:
    nvml = FakeNVML.with_gpus(h100_80g(mig=True))
    nvml.create_gpu_instance(0, GI_1G_ME, MigPlacement(0, 1))
    with pytest.raises(NvmlError, match="Insufficient Resources"):
        nvml.create_gpu_instance(0, GI_1G_ME, MigPlacement(1, 1))
    nvml.create_gpu_instance(0, GI_1G_DOUBLE, MigPlacement(2, 2))


def test_compute_instance_makes_a_mig_device_and_destroy_order_is_enforced() -> None:
    nvml = FakeNVML.with_gpus(a100_40g(mig=True))
    gi = nvml.create_gpu_instance(0, GI_2G, MigPlacement(0, 2))
    with pytest.raises(NvmlError, match="CI profile 2"):
        nvml.create_compute_instance(0, gi.id, THREE_SLICE)
    device = nvml.create_compute_instance(0, gi.id, TWO_SLICE)
    assert device.uuid.startswith("MIG-")
    assert nvml.mig_devices(0) == (device,)
    with pytest.raises(NvmlError, match="Insufficient Resources"):
        nvml.create_compute_instance(0, gi.id, TWO_SLICE)
    with pytest.raises(NvmlError, match="In use") as in_use:
        nvml.destroy_gpu_instance(0, gi.id)
    assert in_use.value.code == 19
    nvml.set_mig_processes(0, device.uuid, (RunningProcess(pid=42, used_memory=1),))
    assert nvml.mig_device_processes(0, device.uuid) == (RunningProcess(42, 1),)
    with pytest.raises(NvmlError, match="In use"):
        nvml.destroy_compute_instance(0, gi.id, device.compute_instance_id)
    nvml.set_mig_processes(0, device.uuid, ())
    nvml.destroy_compute_instance(0, gi.id, device.compute_instance_id)
    nvml.destroy_gpu_instance(0, gi.id)
    assert nvml.gpu_instances(0) == () and nvml.mig_devices(0) == ()
    with pytest.raises(NvmlError, match="Not Found"):
        nvml.destroy_gpu_instance(0, gi.id)
    again = nvml.create_gpu_instance(0, GI_2G, MigPlacement(0, 2))
    assert nvml.create_compute_instance(0, again.id, TWO_SLICE).uuid != device.uuid


def test_mig_mode_cannot_be_disabled_with_live_instances() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(mig=True))
    nvml.create_gpu_instance(0, GI_7G, MigPlacement(0, 8))
    with pytest.raises(NvmlError, match="In use"):
        nvml.set_mig_mode(0, False)


@pytest.mark.parametrize("operation", sorted(MIG_OPERATIONS))
def test_every_mig_operation_can_be_made_to_fail_once(operation: str) -> None:
    nvml = FakeNVML.with_gpus(a100_80g(mig=True))
    gi = nvml.create_gpu_instance(0, GI_2G, MigPlacement(0, 2))
    device = nvml.create_compute_instance(0, gi.id, TWO_SLICE)
    spare = nvml.create_gpu_instance(0, GI_2G, MigPlacement(4, 2))
    calls = {
        "mig_mode": lambda: nvml.mig_mode(0),
        "set_mig_mode": lambda: nvml.set_mig_mode(0, True),
        "gpu_instance_profile": lambda: nvml.gpu_instance_profile(0, TWO_SLICE),
        "gpu_instance_placements": lambda: nvml.gpu_instance_placements(0, GI_2G),
        "create_gpu_instance": lambda: nvml.create_gpu_instance(0, GI_2G, MigPlacement(2, 2)),
        "create_compute_instance": lambda: nvml.create_compute_instance(0, spare.id, ONE_SLICE),
        "gpu_instances": lambda: nvml.gpu_instances(0),
        "mig_devices": lambda: nvml.mig_devices(0),
        "destroy_compute_instance": lambda: nvml.destroy_compute_instance(
            0, gi.id, device.compute_instance_id
        ),
        "destroy_gpu_instance": lambda: nvml.destroy_gpu_instance(0, 5),
        "mig_device_processes": lambda: nvml.mig_device_processes(0, device.uuid),
    }
    nvml.fail(operation, index=0, times=1)
    with pytest.raises(NvmlError, match="injected failure"):
        calls[operation]()
    if operation == "destroy_gpu_instance":
        with pytest.raises(NvmlError, match="Not Found"):
            calls[operation]()
    else:
        calls[operation]()
