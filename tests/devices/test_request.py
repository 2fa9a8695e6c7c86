"""HAMi `GenerateResourceRequests` (container limits to a request), case by case, and the value
check that refuses what nobody can honour."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.nvidia.request import container_request, value_ranges
from pyhami.devices.quantity import parse_quantity
from pyhami.devices.vendor import ContainerSpecError
from pyhami.kube.views import read_container
from pyhami.model import ContainerDeviceRequest, ContainerView, PodSpecError

DEFAULT = NvidiaConfig()


def container(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None
) -> ContainerView:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return read_container({"name": "main", "resources": resources}, init=False)


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
            container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1000"}),
            NvidiaConfig(memoryFactor=4),
            ask(1, memreq=4000),
            id="memory-factor",
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
            container({"nvidia.com/gpu": 1}),
            NvidiaConfig(defaultMemory=2048, defaultCores=10),
            ask(1, memreq=2048, cores=10),
            id="defaults-not-scaled",
        ),
        pytest.param(
            container({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "500"}),
            DEFAULT,
            ask(1, memreq=500),
            id="limits-first-then-requests",
        ),
        pytest.param(container({"nvidia.com/gpu": "0"}), DEFAULT, None, id="zero-count-dropped"),
        pytest.param(
            container({"hami.io/gpu": 1, "hami.io/gpumem": 100}),
            NvidiaConfig(resourceCountName="hami.io/gpu", resourceMemoryName="hami.io/gpumem"),
            ask(1, memreq=100),
            id="configured-names",
        ),
    ],
)
def test_container_request(spec: ContainerView, config: NvidiaConfig, want: Any) -> None:
    assert container_request(spec, config) == want


def test_unreadable_quantity_names_container_and_key() -> None:
    with pytest.raises(ContainerSpecError, match=r"'main'.*nvidia.com/gpumem.*lots"):
        container_request(container({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"}), DEFAULT)
    with pytest.raises(PodSpecError, match=r"'main': resources\.limits must be a mapping"):
        read_container({"name": "main", "resources": {"limits": [1]}}, init=False)


@pytest.mark.parametrize(
    ("limits", "config", "words"),
    [
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": "4294967246"},
            DEFAULT,
            "resources.limits[nvidia.com/gpucores] '4294967246' is out of range: it must be an "
            "integer from 0 to 100 (percent of each GPU's cores)",
            id="cores-that-wrapped-to-minus-50",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": "-5"},
            DEFAULT,
            "[nvidia.com/gpucores] '-5' is out of range: it must be an integer from 0 to 100",
            id="negative-cores",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": "250"},
            DEFAULT,
            "[nvidia.com/gpucores] '250' is out of range",
            id="cores-above-a-card",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"},
            DEFAULT,
            "[nvidia.com/gpumem] '16Gi' is out of range: it must be an integer from 0 to "
            "2147483647 (MiB per GPU); write 16Gi as 16384 (a plain number of MiB, no unit)",
            id="memory-with-a-unit",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000000000"},
            DEFAULT,
            "[nvidia.com/gpumem] '3000000000' is out of range: it must be an integer from 0 to "
            "2147483647 (MiB per GPU)",
            id="memory-above-int32",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "-100"},
            DEFAULT,
            "[nvidia.com/gpumem] '-100' is out of range",
            id="negative-memory",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1.5"},
            DEFAULT,
            "[nvidia.com/gpumem] '1.5' is out of range",
            id="fractional-memory",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": str(2**31 // 4)},
            NvidiaConfig(memoryFactor=4),
            "it must be an integer from 0 to 536870911 (units of 4 MiB per GPU)",
            id="memory-overflow-with-factor",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "150"},
            DEFAULT,
            "[nvidia.com/gpumem-percentage] '150' is out of range: it must be an integer from 0 "
            "to 100 (percent of each GPU's memory)",
            id="percentage-above-100",
        ),
        pytest.param(
            {"nvidia.com/gpu": "500m"},
            DEFAULT,
            "[nvidia.com/gpu] '500m' is out of range: it must be an integer from 0 to 2147483647 "
            "(GPUs)",
            id="fractional-count",
        ),
        pytest.param(
            {"nvidia.com/gpu": "4294967298"},
            DEFAULT,
            "[nvidia.com/gpu] '4294967298' is out of range",
            id="count-that-wrapped-to-2",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/priority": "7"},
            DEFAULT,
            "[nvidia.com/priority] '7' is out of range: it must be an integer from 0 to 1 "
            "(0 high, 1 low)",
            id="priority",
        ),
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"},
            DEFAULT,
            "[nvidia.com/gpumem] 'lots' is not a number; it must be an integer from 0 to",
            id="unreadable",
        ),
    ],
)
def test_values_nobody_can_honour_are_refused_by_name(
    limits: dict[str, Any], config: NvidiaConfig, words: str
) -> None:
    with pytest.raises(ContainerSpecError) as caught:
        container_request(container(limits), config)
    assert str(caught.value).startswith("container 'main': ")
    assert words in str(caught.value)


def test_requests_section_is_checked_too() -> None:
    with pytest.raises(ContainerSpecError, match=r"resources\.requests\[nvidia.com/gpucores\]"):
        container_request(container({"nvidia.com/gpu": 1}, {"nvidia.com/gpucores": "101"}), DEFAULT)


quantity_suffixes = st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "m", "e3"])


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(value_ranges(DEFAULT))),
    st.integers(-(2**40), 2**40),
    quantity_suffixes,
)
def test_the_check_accepts_exactly_the_integers_in_range(
    name: str, number: int, suffix: str
) -> None:
    """Any quantity text: accepted iff its exact value is an integer inside the range, and
    then the request carries that very value (no wrap, no clamp)."""
    text = f"{number}{suffix}"
    value = parse_quantity(text)
    bounds = value_ranges(DEFAULT)[name]
    limits: dict[str, Any] = {name: text}
    if name != "nvidia.com/gpu":
        limits["nvidia.com/gpu"] = "1"
    fits = value.denominator == 1 and bounds.low <= value <= bounds.high
    try:
        request = container_request(container(limits), DEFAULT)
    except ContainerSpecError as err:
        assert not fits
        assert name in str(err) and repr(text) in str(err) and bounds.describe() in str(err)
        return
    assert fits
    if name == "nvidia.com/gpucores":
        assert request is not None and request.coresreq == value
    elif name == "nvidia.com/gpumem" and value:
        assert request is not None and request.memreq == value
    elif name == "nvidia.com/gpu":
        assert (request.nums if request else 0) == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_any_text_is_a_request_or_a_named_refusal(text: str) -> None:
    try:
        container_request(container({"nvidia.com/gpu": "1", "nvidia.com/gpucores": text}),
                          DEFAULT)
    except ContainerSpecError as err:
        assert "nvidia.com/gpucores" in str(err) and repr(text) in str(err)
