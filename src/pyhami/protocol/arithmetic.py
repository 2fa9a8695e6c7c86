"""Go's integer widths and arithmetic, as HAMi's device quantities use them.

Every device quantity in HAMi is a Go `int32`: products wrap, and division truncates toward
zero (Python's `//` floors). The functions take a Python int or a numpy int64 array alike, so
the per-card Fit loop and the engine's column screen compute with this one code.
"""

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # numpy is the engine's; the protocol layer never imports it at run time
    import numpy as np
    import numpy.typing as npt

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

Integers = TypeVar("Integers", int, "npt.NDArray[np.int64]")


def wrap_int32(value: Integers) -> Integers:
    """Go's conversion to `int32`: the low 32 bits, as a signed number."""
    return (value + 2**31) % 2**32 - 2**31


def go_quotient(dividend: Integers, divisor: int) -> Integers:
    """Go's `/` on integers by a positive divisor: truncation toward zero."""
    if divisor <= 0:
        raise ValueError(f"go_quotient needs a positive divisor, got {divisor}")
    # A negative dividend rounds up: add divisor - 1 before flooring.
    return (dividend + (divisor - 1) * (dividend < 0)) // divisor


def percent_of(total: Integers, percent: int, *, wide_product: bool = False) -> Integers:
    """HAMi's `total * percent / 100` for a share of a card's memory, truncated toward zero.

    Fit multiplies in int32 (the product wraps before the division); the device score
    multiplies in int64 (which never wraps for int32 operands) and converts the quotient to
    int32: `wide_product` selects the score's form.
    """
    if wide_product:
        return wrap_int32(go_quotient(total * percent, 100))
    return go_quotient(wrap_int32(total * percent), 100)
