"""What `/explain` shows: the last decision per pod, kept within bounds, as JSON."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pyhami.engine import Decision
from pyhami.kube import JsonObject

EXPLANATIONS_KEPT = 2048
# Also bound what /explain keeps by node verdicts: at 1,000 nodes 2,048 decisions would hold
# two million verdict tuples (hundreds of MB, all walked by every full GC collection).
EXPLAINED_VERDICTS_KEPT = 100_000


class Explanations:
    """The last decision per pod, with the annotations it writes, oldest dropped first."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[Decision, Mapping[str, str]]] = OrderedDict()
        self._verdicts = 0

    def remember(self, decision: Decision, written: Mapping[str, str]) -> None:
        ref = (decision.namespace, decision.name)
        replaced = self._kept.pop(ref, None)
        if replaced is not None:
            self._verdicts -= len(replaced[0].verdicts)
        self._kept[ref] = (decision, written)
        self._verdicts += len(decision.verdicts)
        while len(self._kept) > 1 and (
            len(self._kept) > EXPLANATIONS_KEPT or self._verdicts > EXPLAINED_VERDICTS_KEPT
        ):
            _, (oldest, _) = self._kept.popitem(last=False)
            self._verdicts -= len(oldest.verdicts)

    def get(self, namespace: str, name: str) -> tuple[Decision, Mapping[str, str]] | None:
        return self._kept.get((namespace, name))


def explanation_json(
    decision: Decision, written: Mapping[str, str], registration_errors: Mapping[str, str]
) -> JsonObject:
    """A decision as `/explain` shows it: the answer and the annotations it writes (`written`),
    then every node's verdict and card checks.

    A node whose registration annotation cannot be read now also gets `registrationError`.
    """
    return {
        "pod": f"{decision.namespace}/{decision.name}",
        "outcome": decision.outcome.value,
        "node": decision.node,
        "score": decision.score,
        "error": decision.error,
        "annotations": dict(written),
        "nodes": [
            {
                "node": str(v.node),
                "fits": v.fits,
                "score": v.score,
                "reason": v.reason,
                "reasons": {str(r): n for r, n in v.reasons.items()},
                "cards": v.cards,
                "checks": [_check_json(c) for c in v.checks],
                **(
                    {"registrationError": registration_errors[str(v.node)]}
                    if str(v.node) in registration_errors
                    else {}
                ),
            }
            for v in decision.verdicts.values()
        ],
    }


def _check_json(check: Any) -> JsonObject:
    fields: Any = getattr(check, "__dataclass_fields__", None) or getattr(check, "_fields", ())
    return {str(f): _plain(getattr(check, str(f))) for f in fields}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
