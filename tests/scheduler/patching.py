"""A small RFC 6902 applier (add/remove/replace), enough to check the webhook's patches."""

import copy
import json
from typing import Any

from pyhami.kube.admission_review import AdmissionRequest


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last: Any = int(parts[-1]) if isinstance(parent, list) else parts[-1]
        if op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc


def review_request(
    pod: Any, operation: str = "CREATE", old: Any = None, user: str = "alice"
) -> AdmissionRequest:
    """`pod` as kube-apiserver sends it to the webhook of namespace `ns`, decoded."""
    request = {"uid": "uid", "operation": operation, "namespace": "ns", "object": pod}
    request |= {"userInfo": {"username": user}, "oldObject": old}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return AdmissionRequest.from_http(json.dumps(review).encode(), "application/json")
