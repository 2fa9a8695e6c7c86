"""HAMi's card annotations as CEL selectors in DRA claims: string literals are escaped so no
annotation value can change the expression around it."""

import re

from hypothesis import given
from hypothesis import strategies as st

from pyhami.devices.nvidia.dra_claims import (
    MAX_SELECTOR_LENGTH,
    GpuShare,
    card_selectors,
    cel_string,
)
from pyhami.devices.nvidia.selectors import pod_card_selectors
from pyhami.kube.dra_manifests import claim_spec

# A CEL double-quoted string: any character but a quote, backslash or line break, or an escape.
_LITERAL = re.compile(r'"(?:[^"\\\n\r]|\\(?:[\\"]|u[0-9a-f]{4}|U[0-9a-f]{8}))*"')
_ESCAPE = re.compile(r"\\([\\\"]|u[0-9a-f]{4}|U[0-9a-f]{8})")


def decode(literal: str) -> str:
    """The text of one CEL string literal that uses only the escapes `cel_string` writes."""
    assert _LITERAL.fullmatch(literal), literal

    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        return escaped if len(escaped) == 1 else chr(int(escaped[1:], 16))

    return _ESCAPE.sub(one, literal[1:-1])


def skeleton(expression: str) -> str:
    """The expression with every string literal replaced by `S`: what a value could change."""
    return _LITERAL.sub("S", expression)


unicode_text = st.text(st.characters(exclude_categories=("Cs",)))


@given(unicode_text)
def test_a_cel_literal_is_one_literal_that_reads_back_as_the_text(text: str) -> None:
    literal = cel_string(text)
    assert _LITERAL.fullmatch(literal)
    assert decode(literal) == text


def _type_rule(value: str) -> tuple[str, ...]:
    return card_selectors(pod_card_selectors({"nvidia.com/use-gputype": value}))


def _uuid_rule(value: str) -> tuple[str, ...]:
    return card_selectors(pod_card_selectors({"nvidia.com/nouse-gpuuuid": value}))


@given(unicode_text.filter(lambda t: "," not in t and t.strip() and len(t) < 2000))
def test_no_annotation_value_changes_the_expression_around_its_literal(value: str) -> None:
    for rule in (_type_rule, _uuid_rule):
        [hostile] = rule(value)
        [benign] = rule("A100")
        assert skeleton(hostile) == skeleton(benign)


def test_a_value_written_to_break_out_of_its_string_stays_a_string() -> None:
    attack = 'A100"]) || true || ("\\'  # no comma: HAMi splits items there
    [selector] = _type_rule(attack)
    literals = _LITERAL.findall(selector)
    assert attack.upper() in [decode(literal) for literal in literals]
    assert skeleton(selector) == skeleton(_type_rule("X")[0])


def test_type_rules_follow_hamis_check_type() -> None:
    cards = pod_card_selectors(
        {"nvidia.com/use-gputype": " a100 ,h100", "nvidia.com/nouse-gputype": "mig"}
    )
    use, nouse = card_selectors(cards)
    # items trimmed and upper-cased; the card's type is HAMi's (NVIDIA- prefixed NVML name)
    assert use.startswith('["A100", "H100"].exists(t, ')
    assert '"NVIDIA-" + device.attributes["gpu.pyhami.io"].productName' in use
    assert use.endswith(".upperAscii().contains(t))")
    assert nouse.startswith('!["MIG"].exists(t, ')
    # a value whose items are all empty admits no card, as in HAMi
    [nothing] = _type_rule(",")
    assert nothing.startswith("[].exists(")
    assert card_selectors(pod_card_selectors({"nvidia.com/use-gputype": " "})) == ()


def test_uuid_rules_match_exactly() -> None:
    cards = pod_card_selectors(
        {"nvidia.com/use-gpuuuid": "GPU-b, GPU-a", "nvidia.com/nouse-gpuuuid": "GPU-c"}
    )
    assert card_selectors(cards) == (
        'device.attributes["gpu.pyhami.io"].uuid in ["GPU-a", "GPU-b"]',
        '!(device.attributes["gpu.pyhami.io"].uuid in ["GPU-c"])',
    )


def test_a_selector_longer_than_kubernetes_takes_is_refused() -> None:
    try:
        _uuid_rule("x" * MAX_SELECTOR_LENGTH)
    except ValueError as err:
        assert "at most 10240" in str(err)
    else:
        raise AssertionError("a selector over the limit was accepted")


def test_a_lone_surrogate_is_refused() -> None:
    try:
        cel_string("GPU-\ud800")
    except ValueError as err:
        assert "lone surrogate" in str(err)
    else:
        raise AssertionError("a lone surrogate was accepted")


def test_a_percentage_share_is_one_alternative_per_card_size_in_order() -> None:
    gib = 1024**3
    share = GpuShare(
        count=2,
        cores_percent=0,
        same=frozenset({"numa"}),
        selectors=("true",),
        memory_by_card=((40 * gib, 20 * gib), (80 * gib, 40 * gib)),
    )
    devices = claim_spec({"gpu": share})["devices"]
    [request] = devices["requests"]
    small, large = request["firstAvailable"]
    assert small["name"] == "card-40960mib" and large["name"] == "card-81920mib"
    assert small["capacity"] == {"requests": {"memory": str(20 * gib), "cores": "0"}}
    assert [s["cel"]["expression"] for s in large["selectors"]] == [
        "true",
        f'device.capacity["gpu.pyhami.io"].memory.compareTo(quantity("{80 * gib}")) == 0',
    ]
    assert large["count"] == 2
    # a constraint on the request holds for whichever alternative is chosen
    assert devices["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.pyhami.io/numaNode"}
    ]
