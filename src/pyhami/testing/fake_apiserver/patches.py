"""The three patch kinds kube-apiserver applies to built-in types.

* RFC 6902 JSON patch (`application/json-patch+json`);
* RFC 7386 JSON merge patch (`application/merge-patch+json`): maps merge, `null` deletes,
  anything else (lists included) replaces;
* the strategic-merge subset our components use (`application/strategic-merge-patch+json`):
  maps merge, lists with a known merge key (containers and env by name, conditions by type, …)
  merge element by element, `$patch: delete` / `$patch: replace` directives, primitive lists
  with the merge strategy (finalizers) are unioned, `$deleteFromPrimitiveList/<f>` and
  `$setElementOrder/<f>` are honoured / accepted. Other lists replace, as they do for
  fields without a patch strategy.

A patch that does not parse is `PatchFormatError` (400); one that cannot be applied to this
object is `PatchApplyError` (422), as kube-apiserver answers them.
"""

from __future__ import annotations

import copy
from typing import Any

# patchMergeKey of the list fields in core/v1 and coordination/v1 that carry one. Keyed by
# field name: among the types we serve no two fields share a name with different keys.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "taints": "key",
    "addresses": "type",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Primitive lists with patchStrategy=merge: the patch's items are added to the object's.
MERGED_PRIMITIVE_LISTS = frozenset({"finalizers"})

_DIRECTIVE = "$patch"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_ELEMENT_ORDER = "$setElementOrder/"
_RETAIN_KEYS = "$retainKeys"


class PatchFormatError(ValueError):
    """The patch document itself is malformed."""


class PatchApplyError(ValueError):
    """The patch is well formed but does not apply to this object."""


# --- RFC 7386 -------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch; returns a new document and leaves both inputs alone."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 -------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchFormatError(f"invalid JSON pointer {path!r}: must be empty or start with '/'")
    if path == "":
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    if not token.isdigit() or (token.startswith("0") and token != "0"):
        raise PatchApplyError(f"path {path!r}: {token!r} is not an array index")
    index = int(token)
    limit = len(container) if insert else len(container) - 1
    if index > limit:
        raise PatchApplyError(f"path {path!r}: index {index} is out of range")
    return index


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for token in parts[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchApplyError(f"path {path!r}: {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path, insert=False)]
        else:
            raise PatchApplyError(f"path {path!r}: {token!r} is inside a non-container value")
    return node


def _get(doc: Any, path: str, *, remove: bool = False) -> Any:
    """The value at `path`; with `remove`, also taken out of `doc`."""
    parts = _pointer(path)
    if not parts:
        if remove:
            raise PatchApplyError("cannot remove the whole document")
        return doc
    parent = _parent(doc, parts, path)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchApplyError(f"path {path!r} does not exist")
        return parent.pop(token) if remove else parent[token]
    if isinstance(parent, list):
        index = _index(parent, token, path, insert=False)
        return parent.pop(index) if remove else parent[index]
    raise PatchApplyError(f"path {path!r} is inside a non-container value")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    token = parts[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, path, insert=True), value)
    else:
        raise PatchApplyError(f"path {path!r} is inside a non-container value")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 patch; all or nothing, inputs left alone."""
    if not isinstance(operations, list):
        raise PatchFormatError("a JSON patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise PatchFormatError(f"operation {number} must be an object with a string 'op'")
        kind, path = op["op"], op.get("path")
        if path is None:
            raise PatchFormatError(f"operation {number} ({kind}) is missing 'path'")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchFormatError(f"operation {number} ({kind}) is missing 'value'")
        if kind in ("move", "copy") and "from" not in op:
            raise PatchFormatError(f"operation {number} ({kind}) is missing 'from'")
        value = copy.deepcopy(op.get("value"))
        if kind == "add":
            doc = _add(doc, path, value)
        elif kind == "remove":
            _get(doc, path, remove=True)
        elif kind == "replace":
            _get(doc, path, remove=path != "")  # the whole document is replaced, not removed
            doc = _add(doc, path, value)
        elif kind == "move":
            doc = _add(doc, path, _get(doc, op["from"], remove=True))
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != value:
                raise PatchApplyError(f"test operation {number} failed at {path!r}")
        else:
            raise PatchFormatError(f"operation {number}: unknown op {kind!r}")
    return doc


# --- strategic merge (subset) ---------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to a built-in object; inputs left alone."""
    if not isinstance(patch, dict):
        raise PatchFormatError("a strategic merge patch must be a JSON object")
    base = copy.deepcopy(target) if isinstance(target, dict) else {}
    return _merge_map(base, patch)


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != _DIRECTIVE}
    if directive is not None and directive != "merge":
        raise PatchFormatError(f"unknown $patch directive {directive!r} in a map")
    result = original
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_ELEMENT_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM) :]
            if not isinstance(value, list):
                raise PatchFormatError(f"{key} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [item for item in current if item not in value]
            continue
        if value is None or (isinstance(value, dict) and value.get(_DIRECTIVE) == "delete"):
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = _merge_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(field: str, original: Any, patch: list[Any]) -> list[Any]:
    current = original if isinstance(original, list) else []
    if field in MERGED_PRIMITIVE_LISTS:
        return current + [item for item in patch if item not in current]
    merge_key = MERGE_KEYS.get(field)
    if merge_key is None:
        return copy.deepcopy(patch)
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [
            copy.deepcopy(item)
            for item in patch
            if not (isinstance(item, dict) and item.get(_DIRECTIVE) == "replace")
        ]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchApplyError(
                f"{field}: every element of a merged list needs the merge key {merge_key!r}"
            )
        position = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if position is not None:
                result.pop(position)
        elif position is None:
            result.append(_merge_map({}, item))
        else:
            result[position] = _merge_map(result[position], item)
    return result
