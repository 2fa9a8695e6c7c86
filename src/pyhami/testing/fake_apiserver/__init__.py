"""A kube-apiserver double on aiohttp: real HTTP, resourceVersion, watch, patches, admission.

See `FakeKubeAPIServer`; the store, selectors, patches and admission chain are importable for
tests that want them directly.
"""

from pyhami.testing.fake_apiserver.admission import AdmissionCall, AdmissionChain, Webhook
from pyhami.testing.fake_apiserver.faults import FaultInjector
from pyhami.testing.fake_apiserver.resources import ALL_RESOURCES, ResourceType, resource_named
from pyhami.testing.fake_apiserver.server import FakeKubeAPIServer
from pyhami.testing.fake_apiserver.status import ApiError
from pyhami.testing.fake_apiserver.store import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ObjectStore,
)

__all__ = [
    "ALL_RESOURCES",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "AdmissionCall",
    "AdmissionChain",
    "ApiError",
    "FakeKubeAPIServer",
    "FaultInjector",
    "ObjectStore",
    "ResourceType",
    "Webhook",
    "resource_named",
]
