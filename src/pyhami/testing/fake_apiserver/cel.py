"""The part of CEL that webhook `matchConditions` here use, evaluated as kube-apiserver does.

Supported: string literals (single or double quotes, with `\\\\ \\" \\' \\n \\t \\uXXXX` escapes),
`true`, `false`, list literals, the variables `request`, `object` and `oldObject`, field
selection, the string methods `startsWith`, `endsWith` and `contains`, `in` on a list, `==`,
`!=`, `!`, `&&`, `||` and parentheses. Anything else is refused when the expression is compiled,
naming what is not supported, so a double never quietly disagrees with the real API server.

As in CEL, `&&` and `||` are commutative about errors: `true || error` is true and
`false && error` is false whichever side fails; an error that decides nothing is raised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

VARIABLES = frozenset({"request", "object", "oldObject"})
_METHODS: dict[str, Callable[[str, str], bool]] = {
    "startsWith": str.startswith,
    "endsWith": str.endswith,
    "contains": lambda text, part: part in text,
}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>\|\||&&|==|!=|[!()\[\],.])
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}


class CelUnsupportedError(ValueError):
    """The expression uses CEL this double does not evaluate (or is not CEL at all)."""


class CelEvaluationError(ValueError):
    """The expression failed at run time (no such field, a method on a non-string, …)."""


Value = Any
Node = Callable[[Mapping[str, Value]], Value]


@dataclass(frozen=True, slots=True)
class CelProgram:
    """One compiled expression; `evaluate` gives its value for the variables."""

    source: str
    _root: Node

    def evaluate(self, variables: Mapping[str, Value]) -> Value:
        return self._root(variables)


def compile_expression(source: str) -> CelProgram:
    """Compile `source`; CelUnsupportedError names the first thing that is not supported."""
    return CelProgram(source, _Parser(source).parse())


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        escape = body[i + 1]
        if escape == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            i += 2
        else:
            raise CelUnsupportedError(f"unsupported escape \\{escape} in {literal}")
    return "".join(out)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(source):
            if source[position:].strip() == "":
                break
            match = _TOKEN.match(source, position)
            if match is None:
                raise CelUnsupportedError(
                    f"unsupported CEL at {source[position:].strip()[:20]!r} in {source!r}"
                )
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.at = 0

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise CelUnsupportedError(f"unexpected end of {self.source!r}")
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise CelUnsupportedError(f"expected {expected!r}, got {token[1]!r} in {self.source!r}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self._or()
        if self.at != len(self.tokens):
            raise CelUnsupportedError(f"unsupported CEL at {self._peek()!r} in {self.source!r}")
        return node

    def _or(self) -> Node:
        node = self._and()
        while self._peek() == "||":
            self._take()
            node = _logical(node, self._and(), decisive=True)
        return node

    def _and(self) -> Node:
        node = self._relation()
        while self._peek() == "&&":
            self._take()
            node = _logical(node, self._relation(), decisive=False)
        return node

    def _relation(self) -> Node:
        left = self._unary()
        operator = self._peek()
        if operator not in ("==", "!=", "in"):
            return left
        self._take()
        right = self._unary()
        if operator == "in":
            return lambda v: _member(left(v), right(v))
        equal = operator == "=="
        return lambda v: (left(v) == right(v)) is equal

    def _unary(self) -> Node:
        if self._peek() == "!":
            self._take()
            inner = self._unary()
            return lambda v: not _boolean(inner(v))
        return self._member()

    def _member(self) -> Node:
        node = self._primary()
        while self._peek() == ".":
            self._take()
            kind, name = self._take()
            if kind != "word":
                raise CelUnsupportedError(f"expected a field name, got {name!r} in {self.source!r}")
            node = self._method(node, name) if self._peek() == "(" else _field(node, name)
        return node

    def _method(self, target: Node, name: str) -> Node:
        method = _METHODS.get(name)
        if method is None:
            raise CelUnsupportedError(f"unsupported function {name}() in {self.source!r}")
        self._take("(")
        argument = self._or()
        self._take(")")

        def call(v: Mapping[str, Value]) -> bool:
            text, part = target(v), argument(v)
            if not isinstance(text, str) or not isinstance(part, str):
                raise CelEvaluationError(f"no such overload: {name} on {type(text).__name__}")
            return method(text, part)

        return call

    def _primary(self) -> Node:
        kind, text = self._take()
        if kind == "string":
            value = _unquote(text)
            return lambda _v: value
        if text == "(":
            node = self._or()
            self._take(")")
            return node
        if text == "[":
            items: list[Node] = []
            while self._peek() != "]":
                items.append(self._or())
                if self._peek() != "]":
                    self._take(",")
            self._take("]")
            return lambda v: [item(v) for item in items]
        if text in ("true", "false"):
            flag = text == "true"
            return lambda _v: flag
        if kind == "word" and text in VARIABLES:
            return lambda v: _variable(v, text)
        raise CelUnsupportedError(f"unsupported CEL {text!r} in {self.source!r}")


def _variable(variables: Mapping[str, Value], name: str) -> Value:
    if name not in variables:
        raise CelEvaluationError(f"undeclared reference to {name!r}")
    return variables[name]


def _field(target: Node, name: str) -> Node:
    def select(v: Mapping[str, Value]) -> Value:
        value = target(v)
        if not isinstance(value, Mapping) or name not in value:
            raise CelEvaluationError(f"no such key: {name}")
        return value[name]

    return select


def _member(item: Value, collection: Value) -> bool:
    if not isinstance(collection, list):
        raise CelEvaluationError(f"no such overload: in on {type(collection).__name__}")
    return item in collection


def _boolean(value: Value) -> bool:
    if not isinstance(value, bool):
        raise CelEvaluationError(f"no such overload: a {type(value).__name__} is not a bool")
    return value


def _logical(left: Node, right: Node, *, decisive: bool) -> Node:
    """`||` (decisive=True: a true side decides) or `&&` (a false side decides)."""

    def run(v: Mapping[str, Value]) -> bool:
        failure: CelEvaluationError | None = None
        for side in (left, right):
            try:
                if _boolean(side(v)) is decisive:
                    return decisive
            except CelEvaluationError as err:
                failure = failure or err
        if failure is not None:
            raise failure
        return not decisive

    return run
