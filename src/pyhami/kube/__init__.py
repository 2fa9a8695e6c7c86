"""Async Kubernetes access: a typed adapter over kubernetes-asyncio, an informer, Lease locks."""

from pyhami.kube.annotation_lock import (
    NodeLockAPI,
    NodeLockContentionError,
    NodeLocker,
    NodeLockError,
)
from pyhami.kube.client import JsonObject, KubeClient, ObjectList, PatchType
from pyhami.kube.clock import Clock, SystemClock
from pyhami.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    KubeUnavailable,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from pyhami.kube.informer import EventHandlers, Informer, InformerSettings
from pyhami.kube.lease import LeaseLock, LeaseRecord
from pyhami.kube.lifecycle import AsyncService
from pyhami.kube.resources import (
    DEVICE_CLASSES,
    EVENTS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    Resource,
)
from pyhami.kube.tasks import cancel_and_wait, guarded_task

__all__ = [
    "DEVICE_CLASSES",
    "EVENTS",
    "LEASES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "NODES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_QUOTAS",
    "RESOURCE_SLICES",
    "AlreadyExists",
    "AsyncService",
    "BadRequest",
    "Clock",
    "Conflict",
    "EventHandlers",
    "Forbidden",
    "Gone",
    "Informer",
    "InformerSettings",
    "Invalid",
    "JsonObject",
    "KubeClient",
    "KubeError",
    "KubeUnavailable",
    "LeaseLock",
    "LeaseRecord",
    "NodeLockAPI",
    "NodeLockContentionError",
    "NodeLockError",
    "NodeLocker",
    "NotFound",
    "ObjectList",
    "PatchType",
    "Resource",
    "ServerError",
    "SystemClock",
    "TooManyRequests",
    "Unauthorized",
    "cancel_and_wait",
    "guarded_task",
]
