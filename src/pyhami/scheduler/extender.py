"""The `/explain?pod=` form; the extender's wire types are `pyhami.kube.extender_wire`'s."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PodRef:
    """namespace/name of a pod, parsed from `ns/name` (the `/explain?pod=` form)."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> PodRef:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"pod reference {text!r} must look like namespace/name")
        return cls(namespace=namespace, name=name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
