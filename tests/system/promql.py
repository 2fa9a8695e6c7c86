"""Instant PromQL over scraped samples, for checking the Grafana dashboard against live metrics.

promql-parser (the Rust parser's Python binding) reads the expression; this evaluates the part
of PromQL a dashboard of current values needs: selectors with label matchers, aggregations with
`by`/`without`, arithmetic between vectors (`on`/`ignoring`, one-to-one) and with scalars. Anything
else raises `Unsupported`, so a new panel that needs more fails loudly instead of passing
unchecked. It is stricter than Prometheus in one way: grouping or matching on a label that no
input series carries is an error, because Prometheus silently returns the wrong shape for it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import promql_parser as promql

Labels = frozenset[tuple[str, str]]

ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a / b if b else float("nan"),
}
AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "avg": lambda values: sum(values) / len(values),
    "max": max,
    "min": min,
    "count": len,
}
MATCH_OPS = {"MatchOp.Equal": operator.eq, "MatchOp.NotEqual": operator.ne}


class Unsupported(Exception):
    pass


class LabelMistake(Exception):
    """A label the query groups or matches on is on none of its input series."""


@dataclass(frozen=True, slots=True)
class Series:
    name: str | None  # dropped by aggregation and arithmetic, as in Prometheus
    labels: Labels
    value: float

    def get(self, label: str) -> str:
        return dict(self.labels).get(label, "")


def series_from(scraped: Mapping[str, Iterable[tuple[Mapping[str, str], float]]]) -> list[Series]:
    return [
        Series(name, frozenset(labels.items()), value)
        for name, samples in scraped.items()
        for labels, value in samples
    ]


def evaluate(query: str, samples: list[Series]) -> list[Series]:
    return _eval(promql.parse(query), samples)


def _eval(expr: object, samples: list[Series]) -> list[Series]:
    if isinstance(expr, promql.ParenExpr):
        return _eval(expr.expr, samples)
    if isinstance(expr, promql.VectorSelector):
        return _select(expr, samples)
    if isinstance(expr, promql.AggregateExpr):
        return _aggregate(expr, samples)
    if isinstance(expr, promql.BinaryExpr):
        return _binary(expr, samples)
    raise Unsupported(f"{type(expr).__name__} ({expr}) is not evaluated by the dashboard test")


def _select(expr: promql.VectorSelector, samples: list[Series]) -> list[Series]:
    if expr.offset is not None or expr.at is not None:
        raise Unsupported(f"offset/@ in {expr}")
    wanted: list[tuple[str, Callable[[str, str], bool], str]] = []
    for matcher in expr.matchers.matchers:
        op = str(matcher.op)
        if op not in MATCH_OPS:
            raise Unsupported(f"matcher {op} in {expr}")
        wanted.append((matcher.name, MATCH_OPS[op], matcher.value))
    return [
        s
        for s in samples
        if s.name == expr.name and all(test(s.get(k), v) for k, test, v in wanted)
    ]


def _labels_on_inputs(labels: Iterable[str], inputs: list[Series], where: object) -> None:
    present = {name for s in inputs for name, _ in s.labels}
    missing = sorted(set(labels) - present)
    if inputs and missing:
        raise LabelMistake(f"{where}: no input series has label(s) {missing}; they have {present}")


def _aggregate(expr: promql.AggregateExpr, samples: list[Series]) -> list[Series]:
    op = str(expr.op)
    if op not in AGGREGATIONS or expr.param is not None:
        raise Unsupported(f"aggregation {op} in {expr}")
    inputs = _eval(expr.expr, samples)
    modifier = expr.modifier
    kind = str(modifier.type).lower() if modifier is not None else "by"
    labels = list(modifier.labels) if modifier is not None else []
    _labels_on_inputs(labels, inputs, expr)
    without = kind.endswith("without")
    groups: dict[Labels, list[float]] = {}
    for s in inputs:
        key = frozenset((k, v) for k, v in s.labels if (k not in labels) == without)
        groups.setdefault(key, []).append(s.value)
    return [Series(None, key, AGGREGATIONS[op](values)) for key, values in groups.items()]


def _binary(expr: promql.BinaryExpr, samples: list[Series]) -> list[Series]:
    op = str(expr.op)
    if op not in ARITHMETIC:
        raise Unsupported(f"operator {op} in {expr}")
    apply = ARITHMETIC[op]
    number = _number(expr.lhs), _number(expr.rhs)
    if number[0] is not None and number[1] is not None:
        raise Unsupported(f"scalar arithmetic {expr}")
    if number[1] is not None:
        return [Series(None, s.labels, apply(s.value, number[1])) for s in _eval(expr.lhs, samples)]
    if number[0] is not None:
        return [Series(None, s.labels, apply(number[0], s.value)) for s in _eval(expr.rhs, samples)]
    lhs, rhs = _eval(expr.lhs, samples), _eval(expr.rhs, samples)
    modifier = expr.modifier
    on, labels = False, []
    if modifier is not None:
        if modifier.card is not None and "OneToOne" not in str(modifier.card):
            raise Unsupported(f"group_left/group_right in {expr}")
        if modifier.matching is not None:
            on = str(modifier.matching.type).endswith("Include")  # on(...); Exclude: ignoring
            labels = list(modifier.matching.labels)
            _labels_on_inputs(labels, lhs + rhs, expr)

    def key(s: Series) -> Labels:
        if on:
            return frozenset((k, v) for k, v in s.labels if k in labels)
        return frozenset((k, v) for k, v in s.labels if k not in labels)

    right = {key(s): s for s in rhs}
    return [
        Series(None, key(s), apply(s.value, right[key(s)].value)) for s in lhs if key(s) in right
    ]


def _number(expr: object) -> float | None:
    if isinstance(expr, promql.NumberLiteral):
        return float(expr.val)
    if isinstance(expr, promql.ParenExpr):
        return _number(expr.expr)
    return None


LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def legend_labels(legend: str) -> list[str]:
    """The labels a Grafana legend format (`{{node}} {{device_uuid}}`) reads."""
    return LEGEND_LABEL.findall(legend)
