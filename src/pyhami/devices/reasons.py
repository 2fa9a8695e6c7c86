"""One visit of one card during Fit, for explanations. The reason words are
`pyhami.protocol.Reason` (HAMi's common.go words); counts become text only when read."""

from dataclasses import dataclass

from pyhami.protocol import Reason


@dataclass(frozen=True, slots=True)
class CardCheck:
    """One visit of one card during Fit: the reason it was passed over, or None when taken."""

    uuid: str
    index: int
    reason: Reason | None
    container: int = 0  # position of the container in the pod, init containers first
