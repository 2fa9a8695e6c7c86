"""Reading the plain JSON objects `pyhami.kube.KubeClient` returns."""

from collections.abc import Mapping

from pyhami.kube import JsonObject


def annotations(obj: JsonObject) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def metadata_field(obj: JsonObject, key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")
