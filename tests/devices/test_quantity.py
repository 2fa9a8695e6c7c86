from fractions import Fraction

import pytest

from pyhami.devices.quantity import QuantityError, as_int64, parse_quantity, value_ceil


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1", Fraction(1)),
        ("+3", Fraction(3)),
        ("-2", Fraction(-2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("500m", Fraction(1, 2)),
        ("1000m", Fraction(1)),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("16Gi", Fraction(16 * 2**30)),
        ("1e3", Fraction(1000)),
        ("2E-1", Fraction(1, 5)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_quantity_is_exact(text: object, want: Fraction) -> None:
    assert parse_quantity(text) == want


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1 Gi", "Gi", "1gi", "1KiB", True, None])
def test_bad_quantities_name_the_value(text: object) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def test_as_int64_only_exact_integers_in_range() -> None:
    assert as_int64(parse_quantity("1000m")) == 1
    assert as_int64(parse_quantity("16Gi")) == 16 * 2**30
    assert as_int64(parse_quantity("1.5")) is None
    assert as_int64(parse_quantity("100m")) is None
    assert as_int64(parse_quantity("9E")) == 9 * 10**18  # still fits in int64
    assert as_int64(parse_quantity("10Ei")) is None  # does not


def test_value_rounds_up_like_go() -> None:
    assert value_ceil(parse_quantity("100m")) == 1
    assert value_ceil(parse_quantity("-1.5")) == -1
    assert value_ceil(parse_quantity("7")) == 7
