"""Label and field selectors, parsed like kube-apiserver parses them (a bad one is a 400)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.kube.views import label_selector_requirements
from pyhami.model.views import SelectorRequirement
from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.resources import ResourceType
from pyhami.testing.fake_apiserver.status import ApiError, bad_request

# A label key (a qualified name) and a label value, as validation also checks them.
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_OP = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_BINARY_OP = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^=!\s]*)$")
# `a=b` and `a==b` are `a in (b)`; `a!=b` is `a notin (b)`.
_EQUALITY = {"=": "In", "==": "In", "!=": "NotIn"}


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _checked_key(key: str, whole: str) -> str:
    if len(key.rpartition("/")[2]) > 63 or not LABEL_KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {whole!r}")
    return key


def _checked_values(values: list[str], whole: str) -> frozenset[str]:
    for value in values:
        if len(value) > 63 or not LABEL_VALUE.match(value):
            raise bad_request(
                f"unable to parse requirement: invalid label value {value!r} in {whole!r}"
            )
    return frozenset(values)


def parse_label_selector(text: str) -> tuple[SelectorRequirement, ...]:
    """Equality- and set-based requirements, ANDed; the empty selector matches everything."""
    if not text.strip():
        return ()
    requirements = []
    for part in _split_top_level(text):
        if not part:
            raise bad_request(f"unable to parse requirement: empty requirement in {text!r}")
        if part.startswith("!"):
            key, operator, values = part[1:].strip(), "DoesNotExist", []
        elif match := _SET_OP.match(part):
            key, operator = match["key"], "In" if match["op"] == "in" else "NotIn"
            values = [v.strip() for v in match["values"].split(",")]
            if values == [""]:
                raise bad_request(f"unable to parse requirement: {match['op']} needs values")
        elif match := _BINARY_OP.match(part):
            key, operator, values = match["key"], _EQUALITY[match["op"]], [match["value"]]
        elif " " not in part and "=" not in part and "(" not in part:
            key, operator, values = part, "Exists", []
        else:
            raise bad_request(f"unable to parse requirement: {part!r} in {text!r}")
        requirements.append(
            SelectorRequirement(_checked_key(key, text), operator, _checked_values(values, text))
        )
    return tuple(requirements)


def parse_field_selector(text: str, resource: ResourceType) -> tuple[SelectorRequirement, ...]:
    """`field=value`, `field==value`, `field!=value`, ANDed; only the resource's field labels."""
    if not text.strip():
        return ()
    requirements = []
    for part in text.split(","):
        match = _BINARY_OP.match(part.strip())
        if match is None:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        if match["key"] not in resource.field_labels:
            raise bad_request(f"field label not supported: {match['key']}")
        value = frozenset({match["value"]})
        requirements.append(SelectorRequirement(match["key"], _EQUALITY[match["op"]], value))
    return tuple(requirements)


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed labelSelector plus fieldSelector for one resource."""

    resource: ResourceType
    labels: tuple[SelectorRequirement, ...] = ()
    fields: tuple[SelectorRequirement, ...] = ()

    @classmethod
    def parse(cls, resource: ResourceType, label_selector: str, field_selector: str) -> Selector:
        return cls(
            resource,
            parse_label_selector(label_selector),
            parse_field_selector(field_selector, resource),
        )

    def matches(self, obj: StoredObject) -> bool:
        """Whether the object is selected, by its labels and field-label values."""
        return all(req.holds(obj.meta.labels) for req in self.labels) and all(
            req.holds(obj.fields) for req in self.fields
        )


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector (matchLabels + matchExpressions), as webhooks carry it; an empty
    one selects everything."""

    requirements: tuple[SelectorRequirement, ...] = ()

    @classmethod
    def decode(cls, selector: object) -> LabelSelector:
        """From a webhook configuration's selector object; a 422 ApiError names what is wrong."""
        try:
            return cls(label_selector_requirements(selector or {}))
        except ValueError as err:
            raise ApiError(422, "Invalid", str(err)) from err

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req.holds(labels) for req in self.requirements)


SELECT_ALL = LabelSelector()
