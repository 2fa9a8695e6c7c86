"""A kube-apiserver double on aiohttp: real HTTP, resourceVersion, watch, patches, admission.

See `FakeKubeAPIServer`. Behaviour follows kube-apiserver where pyhami depends on it; where it
knowingly does not (kept small on purpose):

* no RBAC; authentication is by bearer token: `configuration(user)` and
  `write_kubeconfig(path, user)` hand out one token per user (`token` is `system:admin`'s), an
  unknown token is `system:anonymous` unless `require_token=True` makes it 401;
  `requests_by_user` records who asked for what, and admission reviews carry the caller's
  `userInfo`;
* list always serves the newest state (a `continue` page too), so `resourceVersionMatch=Exact`
  works only for the current version; a list with a version newer than the store is 504;
* a watch from an expired version answers 200 with one ERROR event (410 Expired), as the
  watch cache does; bookmarks come every `bookmark_interval_s` when the stream is idle;
* pods: the in-process `store.create` keeps a given status (to seed running pods; over
  HTTP it is reset to Pending, as kube-apiserver does); the spec update rule is simplified
  to "only images, activeDeadlineSeconds, tolerations and schedulingGates may change";
  graceful deletion finishes by itself after min(grace, `pod_grace_cap_s`), in place of
  a kubelet;
* namespaces are deleted at once (no Terminating phase), without deleting their contents;
* core/v1 and events.k8s.io/v1 Events are separate stores;
* admission: mutating webhooks on CREATE and on UPDATE (a PUT or PATCH of the object itself,
  not of a subresource), none on DELETE or CONNECT; no reinvocation; no validating webhooks;
* strategic merge patch: the subset described in `patches`; server-side apply and dryRun
  are refused (415 / 400), never half-done.
"""

from pyhami.testing.fake_apiserver.admission import AdmissionCall, AdmissionChain, Webhook
from pyhami.testing.fake_apiserver.faults import FaultInjector
from pyhami.testing.fake_apiserver.identity import ADMIN, RequestKey, UserInfo, service_account
from pyhami.testing.fake_apiserver.objects import StoredObject
from pyhami.testing.fake_apiserver.resources import ALL_RESOURCES, ResourceType, resource_named
from pyhami.testing.fake_apiserver.server import FakeKubeAPIServer, ServingTLS
from pyhami.testing.fake_apiserver.status import ApiError
from pyhami.testing.fake_apiserver.store import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ObjectStore,
)

__all__ = [
    "ADMIN",
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
    "RequestKey",
    "ResourceType",
    "ServingTLS",
    "StoredObject",
    "UserInfo",
    "Webhook",
    "resource_named",
    "service_account",
]
