"""Pod bookkeeping values: bind phase, and the vgpu/bind unix times."""

from pyhami.protocol.errors import ProtocolError
from pyhami.protocol.goparse import go_quote
from pyhami.protocol.keys import KEY_BIND_PHASE, BindPhase


def parse_bind_phase(value: str) -> BindPhase:
    """`hami.io/bind-phase`: exactly `allocating`, `success` or `failed`."""
    try:
        return BindPhase(value)
    except ValueError:
        allowed = ", ".join(phase.value for phase in BindPhase)
        raise ProtocolError(
            KEY_BIND_PHASE,
            value,
            f"unknown bind phase {go_quote(value)} (expected one of {allowed})",
        ) from None
