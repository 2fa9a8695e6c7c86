"""HAMi `GenerateResourceRequests` (nvidia-fit-score.md §4), case by case."""

from typing import Any

import pytest

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.request import ContainerSpecError, container_request
from pyhami.model import ContainerDeviceRequest

DEFAULT = NvidiaConfig()


def container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None):
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "main", "resources": resources}


def ask(nums: int, memreq: int = 0, pct: int = 101, cores: int = 0) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "NVIDIA", memreq, pct, cores)


@pytest.mark.parametrize(
    ("spec", "config", "want"),
    [
        pytest.param(container({}), DEFAULT, None, id="no-count-no-request"),
        pytest.param(container({"nvidia.com/gpu": "1"}), DEFAULT, ask(1, pct=100), id="whole-card"),
        pytest.param(
            container({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"}),
            DEFAULT,
            ask(2, memreq=3000),
            id="memory-mib",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"}),
            DEFAULT,
            None,
            id="byte-scale-memory-drops-request",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1.5"}),
            DEFAULT,
            None,
            id="fractional-memory-drops-request",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "-1"}),
            DEFAULT,
            None,
            id="negative-memory-drops-request",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1000"}),
            NvidiaConfig(memoryFactor=4),
            ask(1, memreq=4000),
            id="memory-factor",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": str(2**31 // 4)}),
            NvidiaConfig(memoryFactor=4),
            None,
            id="memory-overflow-with-factor",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "150"}),
            DEFAULT,
            ask(1, pct=100),
            id="percentage-clamped",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "30"}),
            DEFAULT,
            ask(1, pct=30),
            id="percentage",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "0"}),
            DEFAULT,
            ask(1, pct=100),
            id="percentage-zero-means-unset",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "0"}),
            DEFAULT,
            ask(1, pct=100),
            id="memory-zero-means-unset",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "0.5"}),
            DEFAULT,
            ask(1, pct=100),
            id="fractional-percentage-ignored",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1}),
            NvidiaConfig(defaultMemory=2048, defaultCores=10),
            ask(1, memreq=2048, cores=10),
            id="defaults-not-scaled",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpucores": "250"}),
            DEFAULT,
            ask(1, pct=100, cores=250),
            id="cores-not-range-checked",
        ),
        pytest.param(
            container({"nvidia.com/gpu": 1, "nvidia.com/gpucores": "-5"}),
            DEFAULT,
            ask(1, pct=100, cores=-5),
            id="negative-cores-pass-through",
        ),
        pytest.param(
            container({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "500"}),
            DEFAULT,
            ask(1, memreq=500),
            id="limits-first-then-requests",
        ),
        pytest.param(container({"nvidia.com/gpu": "0"}), DEFAULT, None, id="zero-count-dropped"),
        pytest.param(container({"nvidia.com/gpu": "500m"}), DEFAULT, None, id="fractional-count"),
        pytest.param(
            container({"hami.io/gpu": 1, "hami.io/gpumem": 100}),
            NvidiaConfig(resourceCountName="hami.io/gpu", resourceMemoryName="hami.io/gpumem"),
            ask(1, memreq=100),
            id="configured-names",
        ),
    ],
)
def test_container_request(spec: dict[str, Any], config: NvidiaConfig, want: Any) -> None:
    assert container_request(spec, config) == want


def test_unreadable_quantity_names_container_and_key() -> None:
    with pytest.raises(ContainerSpecError, match=r"'main'.*nvidia.com/gpumem.*lots"):
        container_request(container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"}), DEFAULT)
    with pytest.raises(ContainerSpecError, match=r"resources\.limits must be a mapping"):
        container_request({"name": "main", "resources": {"limits": [1]}}, DEFAULT)
