"""The pods the demo submits: the packaged examples, or a user's YAML file of the same shape.

A file may also hold Namespace documents; they are created, in file order, before the pods that
follow (a pod's namespace that no document declares is created too)."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import yaml

from pyhami.kube.manifests import (
    ManifestError,
    NamespaceManifest,
    PodManifest,
    read_pod_file_object,
)

EXAMPLES = "pods.yaml"
DemoObject = PodManifest | NamespaceManifest


class PodFileError(ValueError):
    """A pod file the demo cannot use; the message names the file and the document."""


def load_pods(path: Path | None = None, namespace: str = "default") -> list[DemoObject]:
    """Pods (and Namespaces) from `path` (a YAML stream or a `List`); the examples when None."""
    source = EXAMPLES if path is None else str(path)
    if path is None:
        text = resources.files(__package__).joinpath(EXAMPLES).read_text(encoding="utf-8")
    else:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise PodFileError(f"{source}: cannot read: {err}") from err
    return parse_pods(text, source, namespace)


def parse_pods(text: str, source: str, namespace: str = "default") -> list[DemoObject]:
    """The file's Pods (in `namespace` when they name none) and Namespaces, in file order."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise PodFileError(f"{source}: not valid YAML: {err}") from err
    objects: list[DemoObject] = []
    for number, document in enumerate(documents, start=1):
        try:
            objects.extend(read_pod_file_object(document, namespace))
        except ManifestError as err:
            raise PodFileError(f"{source}: document {number}: {err}") from err
    names = [f"{p.namespace}/{p.name}" for p in objects if isinstance(p, PodManifest)]
    if not names:
        raise PodFileError(f"{source}: no pods in the file")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PodFileError(f"{source}: pod names repeat: {', '.join(duplicates)}")
    return objects
