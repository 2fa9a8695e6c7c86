"""Read/modify/write of a coordination.k8s.io/v1 Lease with optimistic concurrency.

`LeaseLock` remembers the resourceVersion of the Lease it last read; `update` sends it, so a
write that raced another replica fails with `Conflict` instead of overwriting it. Times are
MicroTime (RFC 3339 with microseconds, UTC). The election loop lives with the scheduler;
this is the part of it that talks to the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyhami.kube.client import JsonObject, KubeClient, resource_version
from pyhami.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from pyhami.kube.resources import LEASES


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease spec fields leader election reads and writes."""

    holder: str
    lease_duration_s: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


def format_micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: Any) -> datetime | None:
    if not text:
        return None
    if not isinstance(text, str):
        raise ValueError(f"a Lease time must be a string, got {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError as err:
        raise ValueError(f"a Lease time is not RFC 3339: {text!r}") from err


def record_from_lease(lease: JsonObject) -> LeaseRecord:
    spec = lease.get("spec") or {}
    try:
        return LeaseRecord(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
        )
    except (TypeError, ValueError) as err:
        name = (lease.get("metadata") or {}).get("name")
        raise KubeError(0, "BadLease", f"lease {name!r} has a malformed spec: {err}") from err


def lease_spec(record: LeaseRecord) -> JsonObject:
    spec: JsonObject = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_duration_s,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = format_micro_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = format_micro_time(record.renew_time)
    return spec


class LeaseLock:
    """One Lease; `get` / `create` / `update` with conflicts surfaced as `Conflict`."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        if not namespace or not name:
            raise ValueError("a LeaseLock needs a namespace and a name")
        self._client = client
        self.namespace = namespace
        self.name = name
        self._seen_version = ""

    def _body(self, record: LeaseRecord, **metadata: str) -> JsonObject:
        identity = {"name": self.name, "namespace": self.namespace, **metadata}
        return {"metadata": identity, "spec": lease_spec(record)}

    async def get(self) -> LeaseRecord | None:
        """The current record, or None when the Lease does not exist."""
        try:
            lease = await self._client.get(LEASES, self.name, self.namespace)
        except NotFound:
            self._seen_version = ""
            return None
        self._seen_version = resource_version(lease)
        return record_from_lease(lease)

    async def create(self, record: LeaseRecord) -> None:
        """Create the Lease; someone else creating it first raises `Conflict`."""
        try:
            lease = await self._client.create(LEASES, self._body(record), self.namespace)
        except AlreadyExists as err:
            raise Conflict(err.code, err.reason, err.message, err.status) from err
        self._seen_version = resource_version(lease)

    async def update(self, record: LeaseRecord) -> None:
        """Replace the spec, conditional on the version last read (`Conflict` if it moved)."""
        if not self._seen_version:
            raise Conflict(
                409,
                "Conflict",
                f"lease {self.namespace}/{self.name}: update without a prior read (get it first)",
            )
        body = self._body(record, resourceVersion=self._seen_version)
        lease = await self._client.replace(LEASES, self.name, body, self.namespace)
        self._seen_version = resource_version(lease)
