"""FakeNVML behaves like the Nvml interface promises, including its failure modes."""

import threading

import pytest

from pyhami.nvml import (
    NvmlError,
    NvmlNotSupportedError,
    NvmlUnavailableError,
    RunningProcess,
    TopologyLevel,
    Utilization,
)
from pyhami.testing import FakeNVML
from pyhami.testing.fake_nvml import MIB, a100_80g, gb10, t4


def test_builders_give_distinct_stable_identities() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(numa=1))
    assert nvml.device_count() == 2
    assert nvml.device_uuid(0) != nvml.device_uuid(1)
    assert nvml.device_uuid(0) == FakeNVML.with_gpus(t4()).device_uuid(0)
    assert nvml.device_name(1) == "NVIDIA A100-SXM4-80GB"
    assert nvml.device_memory(0).total == 81920 * MIB
    assert nvml.device_numa_node(1) == 1
    assert nvml.device_bus_id(1) == "0000:11:00.0"


def test_explicit_uuid_is_kept() -> None:
    nvml = FakeNVML.with_gpus(t4(uuid="GPU-aaaa"))
    assert nvml.device_uuid(0) == "GPU-aaaa"


def test_unified_memory_board_reports_not_supported() -> None:
    nvml = FakeNVML.with_gpus(gb10())
    with pytest.raises(NvmlNotSupportedError):
        nvml.device_memory(0)


def test_unknown_index_is_an_nvml_error() -> None:
    with pytest.raises(NvmlError, match="no such index"):
        FakeNVML.with_gpus(t4()).device_uuid(3)


def test_links_both_ways_and_one_way() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g())
    nvml.link(0, 1, nvlinks=2)
    nvml.link(1, 2, nvlinks=1, one_way=True)
    assert [link.remote_bus_id for link in nvml.nvlinks(0)] == [nvml.device_bus_id(1)] * 2
    assert len(nvml.nvlinks(1)) == 3
    assert len(nvml.nvlinks(2)) == 0


def test_topology_defaults_follow_numa_and_can_be_set() -> None:
    nvml = FakeNVML.with_gpus(a100_80g(), a100_80g(), a100_80g(numa=1))
    assert nvml.topology_level(0, 1) is TopologyLevel.NODE
    assert nvml.topology_level(0, 2) is TopologyLevel.SYSTEM
    nvml.set_topology(1, 0, TopologyLevel.SINGLE)
    assert nvml.topology_level(0, 1) is TopologyLevel.SINGLE


def test_usage_can_be_scripted() -> None:
    nvml = FakeNVML.with_gpus(t4())
    nvml.set_usage(
        0,
        memory_used_mib=100,
        utilization=Utilization(gpu=40, memory=7),
        processes=(RunningProcess(pid=42, used_memory=100 * MIB),),
    )
    assert nvml.device_memory(0).used == 100 * MIB
    assert nvml.utilization(0) == Utilization(gpu=40, memory=7)
    assert nvml.running_processes(0)[0].pid == 42


def test_failure_on_one_card_for_a_number_of_calls() -> None:
    nvml = FakeNVML.with_gpus(t4(), t4())
    nvml.fail("device_memory", index=1, times=2)
    nvml.device_memory(0)
    for _ in range(2):
        with pytest.raises(NvmlError, match="injected"):
            nvml.device_memory(1)
    assert nvml.device_memory(1).total == 15360 * MIB


def test_failure_on_every_card_until_healed() -> None:
    nvml = FakeNVML.with_gpus(t4(), t4())
    nvml.fail("device_uuid", error=NvmlError("nvmlDeviceGetUUID", "GPU is lost", code=15))
    with pytest.raises(NvmlError, match="GPU is lost"):
        nvml.device_uuid(0)
    nvml.heal("device_uuid")
    assert nvml.device_uuid(0).startswith("GPU-")


def test_failing_an_unknown_operation_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown NVML operation"):
        FakeNVML.with_gpus(t4()).fail("device_colour")


def test_no_driver_makes_open_fail_clearly() -> None:
    nvml = FakeNVML.with_gpus(t4())
    assert nvml.open() is nvml
    nvml.remove_driver()
    with pytest.raises(NvmlUnavailableError, match="Not Found"):
        nvml.open()


def test_xid_wait_times_out_then_delivers_from_another_thread() -> None:
    nvml = FakeNVML.with_gpus(t4(), t4())
    watch = nvml.watch_xids()
    assert watch.wait(10) is None
    timer = threading.Timer(0.05, nvml.inject_xid, args=(1, 79))
    timer.start()
    event = watch.wait(5000)
    timer.join()
    assert event is not None
    assert (event.uuid, event.xid) == (nvml.device_uuid(1), 79)
    watch.close()
    nvml.inject_xid(0, 79)  # a closed watch no longer receives anything
    assert watch.wait(1) is None


def test_unwatchable_card_is_reported() -> None:
    nvml = FakeNVML.with_gpus(t4(), t4())
    nvml.make_unwatchable(1)
    assert nvml.watch_xids().unwatched == (1,)
