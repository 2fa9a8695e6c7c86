"""What Kubernetes' own components take and leave besides API objects, typed: kube-scheduler's
`leaderElection` section, kube-apiserver's audit events (one JSON object per log line)."""

from typing import TypedDict


class LeaderElection(TypedDict, total=False):
    """A component's `leaderElection` configuration (durations as Go writes them: `15s`)."""

    leaderElect: bool
    leaseDuration: str
    renewDeadline: str
    retryPeriod: str
    resourceLock: str
    resourceName: str
    resourceNamespace: str


class AuditUser(TypedDict):
    username: str


class AuditStatus(TypedDict, total=False):
    code: int
    message: str


class AuditEvent(TypedDict, total=False):
    """One request as kube-apiserver's audit log records it at level Metadata (the fields
    read here; the log has more)."""

    user: AuditUser
    verb: str
    requestURI: str
    responseStatus: AuditStatus
