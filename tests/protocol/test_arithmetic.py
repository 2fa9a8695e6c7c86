"""Go's int32 arithmetic: the same answers for one number and for a numpy column of them."""

from fractions import Fraction
from math import trunc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyhami.protocol.arithmetic import (
    INT32_MAX,
    INT32_MIN,
    go_quotient,
    percent_of,
    wrap_int32,
)

INT32 = st.integers(INT32_MIN, INT32_MAX)


def go_int32(value: int) -> int:
    """Reference: keep the low 32 bits, then read bit 31 as the sign."""
    low = value & 0xFFFFFFFF
    return low - (1 << 32) if low & (1 << 31) else low


@given(st.integers(-(2**62), 2**62))
def test_wrap_int32_keeps_the_low_32_bits(value: int) -> None:
    assert wrap_int32(value) == go_int32(value)


@given(st.integers(-(2**62), 2**62), st.integers(1, 1000))
def test_go_quotient_truncates_toward_zero(dividend: int, divisor: int) -> None:
    assert go_quotient(dividend, divisor) == trunc(Fraction(dividend, divisor))


def test_go_quotient_is_not_floor_division() -> None:
    assert go_quotient(-33033, 100) == -330  # Python's -33033 // 100 is -331
    with pytest.raises(ValueError, match="positive divisor, got 0"):
        go_quotient(5, 0)


@given(st.lists(INT32, min_size=1, max_size=20), st.integers(0, 101), st.booleans())
def test_a_column_computes_exactly_what_each_card_computes(
    totals: list[int], percent: int, wide: bool
) -> None:
    column = percent_of(np.array(totals, np.int64), percent, wide_product=wide)
    assert column.dtype == np.int64
    assert column.tolist() == [percent_of(total, percent, wide_product=wide) for total in totals]


@given(INT32, st.integers(0, 101))
def test_percent_of_is_hamis_fit_and_score_arithmetic(total: int, percent: int) -> None:
    fit_share = percent_of(total, percent)
    score_share = percent_of(total, percent, wide_product=True)
    assert fit_share == trunc(Fraction(go_int32(total * percent), 100))  # int32 product
    assert score_share == go_int32(trunc(Fraction(total * percent, 100)))  # int64 product


def test_fit_wraps_the_product_where_the_score_does_not() -> None:
    assert percent_of(30_000_000, 100) == -12_949_672
    assert percent_of(30_000_000, 100, wide_product=True) == 30_000_000
