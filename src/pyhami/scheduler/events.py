"""Kubernetes Events on pods (`FilteringSucceed`, `FilteringFailed`, `BindingSucceed`, …): their
kinds and HAMi's per-reason messages; `pyhami.kube.events.EventRecorder` writes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyhami.kube.events import EventRecorder

__all__ = ["NORMAL", "WARNING", "EventRecorder", "reason_events"]

NORMAL = "Normal"
WARNING = "Warning"


def reason_events(words_by_node: Mapping[str, Iterable[str]]) -> list[str]:
    """HAMi's per-reason messages: `"<k> nodes <Reason>(<sorted node names>)"`, from each
    failed node's reason words (a node without card reasons, e.g. unregistered, has its text)."""
    by_reason: dict[str, list[str]] = {}
    for node, words in words_by_node.items():
        for word in words:
            by_reason.setdefault(word, []).append(node)
    return [
        f"{len(nodes)} nodes {word}({', '.join(sorted(nodes))})"
        for word, nodes in sorted(by_reason.items())
    ]
