"""Allocate's pure steps: which entry a container gets, and its env, mounts and limits file."""

from pathlib import PurePosixPath
from typing import Any

import pytest

from pyhami.deviceplugin.allocation import (
    AllocationError,
    AllocationSettings,
    ContainerPlan,
    HostFiles,
    plan_container,
    take_next,
)
from pyhami.kube.views import read_pod
from pyhami.model import ContainerDevice, ContainerDevices, PodView

A = "GPU-aaaaaaaa-1111-2222-3333-444455556666"
B = "GPU-bbbbbbbb-1111-2222-3333-444455556666"


def dev(uuid: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, type="NVIDIA", usedmem=mem, usedcores=cores)


def pod(
    init: list[str],
    regular: list[str],
    env: dict[str, list[dict[str, str]]] | None = None,
    limits: dict[str, str] | None = None,
) -> PodView:
    """`limits`: the resource limits of every app container."""
    env = env or {}
    resources = {"limits": limits} if limits else {}
    return read_pod({
        "metadata": {"namespace": "default", "name": "p", "uid": "uid-1"},
        "spec": {
            "initContainers": [{"name": n, "env": env.get(n, [])} for n in init],
            "containers": [
                {"name": n, "env": env.get(n, []), "resources": resources} for n in regular
            ],
        },
    })


def test_entries_map_init_first_and_skip_empty_ones() -> None:
    entries: list[ContainerDevices] = [(), (dev(A, 1000, 10),), (), (dev(B, 2000, 20),)]
    subject = pod(["init-a", "init-b"], ["main", "side"])
    first = take_next(subject, entries, ["x"])
    second = take_next(subject, entries, ["y"])
    assert (first.position, first.container.name) == (1, "init-b")
    assert (second.position, second.container.name) == (3, "side")
    assert entries == [(), (), (), ()]
    with pytest.raises(AllocationError, match="no pending device allocation found"):
        take_next(subject, entries, ["z"])


def test_device_count_must_match_kubelets() -> None:
    with pytest.raises(AllocationError, match="device number not matched"):
        take_next(pod([], ["main"]), [(dev(A, 1, 1),)], ["x", "y"])


def test_entry_beyond_the_pods_containers_is_refused() -> None:
    with pytest.raises(AllocationError, match="container index 1 out of range"):
        take_next(pod([], ["main"]), [(), (dev(A, 1, 1),)], ["x"])


def plan(
    devices: ContainerDevices,
    settings: AllocationSettings,
    files: HostFiles | None = None,
    env: list[dict[str, str]] | None = None,
    namespace: str = "team-a",
    limits: dict[str, str] | None = None,
) -> ContainerPlan:
    subject = pod([], ["main"], {"main": env or []}, limits)
    slot = take_next(subject, [devices], ["k"] * len(devices))
    return plan_container(
        slot,
        pod_uid="uid-1",
        namespace=namespace,
        cache_id="c0ffee",
        settings=settings,
        files=files or HostFiles(),
    )


def test_hamis_example_env_and_mounts() -> None:
    result = plan((dev(A, 3000, 50),), AllocationSettings(lib_cuda_log_level="1"))
    assert result.envs == {
        "NVIDIA_VISIBLE_DEVICES": A,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "50",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/c0ffee.cache",
        "LIBCUDA_LOG_LEVEL": "1",
    }
    # libvgpu's folder, with limits.env, is read-only; only the region file is writable.
    assert [(m.container_path, m.host_path, m.read_only) for m in result.mounts] == [
        ("/usr/local/vgpu", "/usr/local/vgpu/containers/uid-1_main", True),
        ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
        (
            "/usr/local/vgpu/c0ffee.cache",
            "/usr/local/vgpu/containers/uid-1_main/c0ffee.cache",
            False,
        ),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
        ("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload", True),
    ]
    assert result.cache_dir == PurePosixPath("/usr/local/vgpu/containers/uid-1_main")
    assert result.limits_file == result.cache_dir / "limits.env"
    assert result.library_mount_point == result.cache_dir / "libvgpu.so"
    assert result.region_file == result.cache_dir / "c0ffee.cache"
    assert result.limits_text == (
        "# written by pyhami device-plugin\n"
        "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nCUDA_DEVICE_SM_LIMIT=50\n"
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/c0ffee.cache\nLIBCUDA_LOG_LEVEL=1\n"
        "CUDA_TASK_PRIORITY=1\n"
    )


def test_every_optional_variable_and_mount() -> None:
    settings = AllocationSettings(
        hook_path=PurePosixPath("/opt/h"), version="v9", oversubscribe=True, disable_core_limit=True
    )
    files = HostFiles(libvgpu_versioned=True, license=True, vgpuvalidator=True)
    result = plan((dev(A, 1000, 30), dev(B, 2000, 40), dev(A, 500, 30)), settings, files)
    assert result.envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert [result.envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(3)] == [
        "1000m",
        "2000m",
        "500m",
    ]
    assert result.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert result.envs["CUDA_OVERSUBSCRIBE"] == "true"
    assert result.envs["GPU_CORE_UTILIZATION_POLICY"] == "disable"
    assert "LIBCUDA_LOG_LEVEL" not in result.envs
    assert [m.container_path for m in result.mounts] == [
        "/opt/h/vgpu",
        "/opt/h/vgpu/libvgpu.so",
        "/opt/h/vgpu/c0ffee.cache",
        "/tmp/vgpulock",
        "/etc/ld.so.preload",
        "/tmp/license",
        "/usr/bin/vgpuvalidator",
    ]
    assert result.mounts[1].host_path == "/opt/h/vgpu/libvgpu.so.v9"


@pytest.mark.parametrize(
    "value, preload", [("true", False), ("T", False), ("1", False), ("yes", True), ("false", True)]
)
def test_cuda_disable_control_drops_the_preload_in_an_allowed_namespace(
    value: str, preload: bool
) -> None:
    allowed = AllocationSettings(limit_control_namespaces=frozenset({"team-a"}))
    env = [{"name": "CUDA_DISABLE_CONTROL", "value": value}]
    result = plan((dev(A, 1, 1),), allowed, env=env)
    assert ("/etc/ld.so.preload" in [m.container_path for m in result.mounts]) is preload
    # Anywhere else a pod's CUDA_DISABLE_CONTROL changes nothing: libvgpu stays preloaded.
    for settings, namespace in ((AllocationSettings(), "team-a"), (allowed, "team-b")):
        elsewhere = plan((dev(A, 1, 1),), settings, env=env, namespace=namespace)
        assert "/etc/ld.so.preload" in [m.container_path for m in elsewhere.mounts]


FORGED_ENV = [
    {"name": "CUDA_TASK_PRIORITY", "value": "0"},
    {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"},
    {"name": "OTHER", "value": "x"},
    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
]


def file_settings(result: ContainerPlan) -> dict[str, str]:
    lines = result.limits_text.splitlines()[1:]
    return dict(line.split("=", 1) for line in lines)


def test_limits_file_derives_priority_and_policy_and_ignores_a_forged_env() -> None:
    """A pod that bypassed the webhook (its ignore label) and wrote a high priority and the
    core limit off into its env gets neither: the file says the default priority, and what the
    file says the env can only tighten."""
    forged = file_settings(plan((dev(A, 100, 10),), AllocationSettings(), env=FORGED_ENV))
    assert forged["CUDA_TASK_PRIORITY"] == "1"
    assert "GPU_CORE_UTILIZATION_POLICY" not in forged
    asked = plan(
        (dev(A, 100, 10),),
        AllocationSettings(core_policy="force"),
        env=FORGED_ENV,
        limits={"nvidia.com/gpu": "1", "nvidia.com/priority": "0"},
    )
    assert file_settings(asked)["CUDA_TASK_PRIORITY"] == "0"  # the resource it was admitted with
    assert file_settings(asked)["GPU_CORE_UTILIZATION_POLICY"] == "force"
    disabled = plan((dev(A, 100, 10),), AllocationSettings(disable_core_limit=True), env=FORGED_ENV)
    assert file_settings(disabled)["GPU_CORE_UTILIZATION_POLICY"] == "disable"


def test_limits_file_takes_the_specs_values_in_a_namespace_allowed_to_control_libvgpu() -> None:
    allowed = AllocationSettings(limit_control_namespaces=frozenset({"team-a"}))
    env = [*FORGED_ENV, {"name": "CUDA_TASK_PRIORITY", "value": "1 2"}]  # spaces: env-only
    result = file_settings(plan((dev(A, 100, 10),), allowed, env=env, namespace="team-a"))
    assert (result["CUDA_TASK_PRIORITY"], result["GPU_CORE_UTILIZATION_POLICY"]) == (
        "0",
        "disable",
    )


def gpu_pod(init: list[tuple[str, int]], regular: list[tuple[str, int]]) -> PodView:
    def spec(name: str, gpus: int) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        return {"name": name, "resources": {"limits": limits}}

    return read_pod({
        "metadata": {"namespace": "default", "name": "p", "uid": "u"},
        "spec": {
            "initContainers": [spec(n, g) for n, g in init],
            "containers": [spec(n, g) for n, g in regular],
        },
    })


def test_hami_dense_values_map_to_the_containers_that_asked() -> None:
    # HAMi HEAD lists only GPU containers for NVIDIA: [A] for [init, main].
    subject = gpu_pod([("setup", 0)], [("main", 1), ("side", 0), ("tail", 1)])
    dense: list[ContainerDevices] = [(dev(A, 1, 1),), (dev(B, 2, 2),), ()]
    assigned = tuple(dense)
    first = take_next(subject, dense, ["x"], assigned=assigned)
    second = take_next(subject, dense, ["y"], assigned=assigned)
    assert (first.container.name, second.container.name) == ("main", "tail")


def test_per_container_values_map_positionally_either_way() -> None:
    subject = gpu_pod([("setup", 1)], [("side", 0), ("main", 1)])
    entries: list[ContainerDevices] = [(dev(A, 1, 1),), (), (dev(B, 2, 2),), ()]
    assigned = tuple(entries)
    names = [
        take_next(subject, entries, ["x"], assigned=assigned).container.name for _ in range(2)
    ]
    assert names == ["setup", "main"]
