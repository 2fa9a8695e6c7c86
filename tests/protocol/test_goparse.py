"""Go's strconv and strings behaviour, reproduced (the parsing primitives the formats rely on)."""

import pytest

from pyhami.protocol.goparse import (
    GoDurationError,
    GoNumError,
    GoRangeError,
    GoSyntaxError,
    atoi,
    go_quote,
    parse_bool,
    parse_duration,
    parse_int,
    to_upper,
    trim_space,
)


@pytest.mark.parametrize(
    "text, want",
    [
        ("0", 0),
        ("+5", 5),
        ("-5", -5),
        ("-0", 0),
        ("007", 7),
        ("2147483647", 2**31 - 1),
        ("-2147483648", -(2**31)),
    ],
)
def test_parse_int32_accepts(text: str, want: int) -> None:
    assert parse_int(text, 32) == want


@pytest.mark.parametrize(
    "text, error",
    [
        ("", GoSyntaxError),
        ("+", GoSyntaxError),
        ("-", GoSyntaxError),
        (" 1", GoSyntaxError),
        ("1 ", GoSyntaxError),
        ("1_000", GoSyntaxError),
        ("0x10", GoSyntaxError),
        ("1.0", GoSyntaxError),
        ("١", GoSyntaxError),  # Arabic-Indic digit: Python's int() takes it, Go does not
        ("++1", GoSyntaxError),
        ("2147483648", GoRangeError),
        ("-2147483649", GoRangeError),
        ("4294967296x", GoRangeError),  # overflow is noticed before the bad character
        ("2147483648x", GoSyntaxError),  # still inside ParseUint's 32-bit range: syntax first
    ],
)
def test_parse_int32_refuses(text: str, error: type[GoNumError]) -> None:
    with pytest.raises(error):
        parse_int(text, 32)


def test_error_texts_are_gos() -> None:
    with pytest.raises(GoNumError) as syntax:
        parse_int("notanint", 32)
    assert str(syntax.value) == 'strconv.ParseInt: parsing "notanint": invalid syntax'
    with pytest.raises(GoNumError) as too_big:
        parse_int("99999999999", 32)
    assert str(too_big.value) == 'strconv.ParseInt: parsing "99999999999": value out of range'
    with pytest.raises(GoNumError) as atoi_error:
        atoi("x")
    assert str(atoi_error.value) == 'strconv.Atoi: parsing "x": invalid syntax'
    with pytest.raises(GoNumError) as bool_error:
        parse_bool("yes")
    assert str(bool_error.value) == 'strconv.ParseBool: parsing "yes": invalid syntax'


def test_atoi_is_64_bit() -> None:
    assert atoi("9223372036854775807") == 2**63 - 1
    assert atoi("-9223372036854775808") == -(2**63)
    with pytest.raises(GoRangeError):
        atoi("9223372036854775808")


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_bool_true_words(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_parse_bool_false_words(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "tRUE", " true", "2", "on"])
def test_parse_bool_refuses(text: str) -> None:
    with pytest.raises(GoSyntaxError):
        parse_bool(text)


@pytest.mark.parametrize(
    "text, quoted",
    [
        ("a", '"a"'),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
        ("\n\t\x00\x7f", '"\\n\\t\\x00\\x7f"'),
        ("é中", '"é中"'),
        ("\u200b", '"\\u200b"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_trim_space_is_gos_not_pythons() -> None:
    assert trim_space("\u3000 a \t\n") == "a"
    assert trim_space("\x1ca\x1f") == "\x1ca\x1f"  # Python's strip() would remove these


def test_to_upper_is_simple_mapping() -> None:
    assert to_upper("nvidia a100") == "NVIDIA A100"
    assert to_upper("ß") == "ß"  # Python's upper() gives "SS"


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("5m", 300),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("1.s", 1),
        ("250ms", 0.25),
        ("1µs", 1e-6),
        ("1μs", 1e-6),
        ("0", 0),
        ("-0", 0),
        ("+1s", 1),
        ("-5m", -300),
        ("2562047h", 2562047 * 3600),
    ],
)
def test_parse_duration_accepts_gos_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text, message",
    [
        ("", 'time: invalid duration ""'),
        ("m5", 'time: invalid duration "m5"'),
        (".s", 'time: invalid duration ".s"'),
        ("-", 'time: invalid duration "-"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ("5", 'time: missing unit in duration "5"'),
        ("5x", 'time: unknown unit "x" in duration "5x"'),
        ("5 m", 'time: unknown unit " m" in duration "5 m"'),
        ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
        ("30 seconds", 'time: unknown unit " seconds" in duration "30 seconds"'),
    ],
)
def test_parse_duration_refuses_with_gos_words(text: str, message: str) -> None:
    with pytest.raises(GoDurationError) as raised:
        parse_duration(text)
    assert str(raised.value) == message
