"""The pods the demo submits: the packaged examples, or a user's YAML file of the same shape.

A file may also hold Namespace documents; they are created, in file order, before the pods that
follow (a pod's namespace that no document declares is created too)."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pyhami.kube import JsonObject

EXAMPLES = "pods.yaml"


class PodFileError(ValueError):
    """A pod file the demo cannot use; the message names the file and the document."""


def example_pods_text() -> str:
    return resources.files(__package__).joinpath(EXAMPLES).read_text(encoding="utf-8")


def load_pods(path: Path | None = None, namespace: str = "default") -> list[JsonObject]:
    """Pods (and Namespaces) from `path` (a YAML stream or a `List`); the examples when None."""
    source = EXAMPLES if path is None else str(path)
    if path is None:
        text = example_pods_text()
    else:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise PodFileError(f"{source}: cannot read: {err}") from err
    return parse_pods(text, source, namespace)


def parse_pods(text: str, source: str, namespace: str = "default") -> list[JsonObject]:
    """The file's Pods (in `namespace` when they name none) and Namespaces, in file order."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise PodFileError(f"{source}: not valid YAML: {err}") from err
    pods: list[JsonObject] = []
    for number, document in enumerate(documents, start=1):
        items = document.get("items") if isinstance(document, dict) else None
        if isinstance(document, dict) and document.get("kind") == "List":
            if not isinstance(items, list):
                raise PodFileError(f"{source}: document {number}: a List needs items: [...]")
            pods.extend(
                _object(item, f"{source}: document {number} item {i}", namespace)
                for i, item in enumerate(items, start=1)
            )
        else:
            pods.append(_object(document, f"{source}: document {number}", namespace))
    only_pods = [p for p in pods if not is_namespace(p)]
    if not only_pods:
        raise PodFileError(f"{source}: no pods in the file")
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in only_pods]
    duplicates = sorted({f"{ns}/{n}" for ns, n in names if names.count((ns, n)) > 1})
    if duplicates:
        raise PodFileError(f"{source}: pod names repeat: {', '.join(duplicates)}")
    return pods


def is_namespace(obj: JsonObject) -> bool:
    return obj.get("kind") == "Namespace"


def _object(document: Any, where: str, namespace: str) -> JsonObject:
    if not isinstance(document, dict):
        raise PodFileError(f"{where}: expected a Pod mapping, got {type(document).__name__}")
    kind = document.get("kind", "Pod")
    if kind == "Namespace":
        return _namespace(document, where)
    if kind != "Pod":
        raise PodFileError(f"{where}: kind {kind!r} is neither a Pod nor a Namespace")
    return _pod(document, where, namespace)


def _namespace(document: JsonObject, where: str) -> JsonObject:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise PodFileError(f"{where}: Namespace metadata.name is missing")
    kept = {k: metadata[k] for k in ("name", "labels", "annotations") if k in metadata}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": kept}


def _pod(document: JsonObject, where: str, namespace: str) -> JsonObject:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise PodFileError(f"{where}: metadata.name is missing")
    spec = document.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        raise PodFileError(f"{where}: pod {metadata['name']!r} has no spec.containers list")
    pod = dict(document)
    pod["apiVersion"] = pod.get("apiVersion", "v1")
    pod["kind"] = "Pod"
    pod["metadata"] = {**metadata, "namespace": str(metadata.get("namespace") or namespace)}
    pod["spec"] = {**spec, "containers": [_container(c, where) for c in spec["containers"]]}
    if spec.get("initContainers"):
        pod["spec"]["initContainers"] = [_container(c, where) for c in spec["initContainers"]]
    return pod


def _container(container: Any, where: str) -> JsonObject:
    """Quantities as the API server stores them: YAML's `nvidia.com/gpu: 1` becomes "1"."""
    if not isinstance(container, dict) or not isinstance(container.get("name"), str):
        raise PodFileError(f"{where}: every container needs a name")
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise PodFileError(f"{where}: container {container['name']!r}: resources is not a mapping")
    quantities: JsonObject = {}
    for field in ("limits", "requests"):
        values = resources.get(field) or {}
        if not isinstance(values, dict) or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in values.values()
        ):
            raise PodFileError(
                f"{where}: container {container['name']!r}: resources.{field} must map names "
                "to quantities"
            )
        if values:
            quantities[field] = {str(k): str(v) for k, v in values.items()}
    return {**container, "resources": quantities}
