"""Async Kubernetes access: a typed adapter over kubernetes-asyncio, an informer, Lease locks."""

from pyhami.kube.client import JsonObject, KubeClient, ObjectList, PatchType, WatchEvent
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
    UnsupportedMediaType,
)
from pyhami.kube.informer import EventHandlers, Informer, InformerSettings, InformerStats
from pyhami.kube.lease import LeaseLock, LeaseRecord
from pyhami.kube.lifecycle import AsyncService
from pyhami.kube.nodelock import NodeLockAPI, NodeLockContentionError, NodeLocker, NodeLockError
from pyhami.kube.ratelimit import RateLimit, TokenBucket
from pyhami.kube.resources import (
    CONFIG_MAPS,
    DEVICE_CLASSES,
    EVENTS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_QUOTAS,
    Resource,
)
from pyhami.kube.tasks import cancel_and_wait, guarded_task

__all__ = [
    "CONFIG_MAPS",
    "DEVICE_CLASSES",
    "EVENTS",
    "LEASES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_QUOTAS",
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
    "InformerStats",
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
    "RateLimit",
    "Resource",
    "ServerError",
    "SystemClock",
    "TokenBucket",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
    "WatchEvent",
    "cancel_and_wait",
    "guarded_task",
]
