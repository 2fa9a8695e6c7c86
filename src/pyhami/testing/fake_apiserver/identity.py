"""Who is asking: bearer tokens mapped to Kubernetes users, and what each user asked for.

Groups follow kube-apiserver's conventions for the name, so an AdmissionReview's `userInfo`
looks as it would in a cluster: a service account is in `system:serviceaccounts` and
`system:serviceaccounts:<namespace>`, a node in `system:nodes`, every known user in
`system:authenticated`. No RBAC is enforced here; `RequestKey` records are what tests hold
against the chart's rules.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

ADMIN = "system:admin"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    groups: tuple[str, ...]

    @classmethod
    def named(cls, username: str) -> UserInfo:
        if username == ANONYMOUS:
            return cls(username, ("system:unauthenticated",))
        groups: list[str] = []
        if username == ADMIN:
            groups.append("system:masters")
        elif username.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":", 1)[0]
            groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        elif username.startswith("system:node:"):
            groups.append("system:nodes")
        return cls(username, (*groups, "system:authenticated"))


def service_account(namespace: str, name: str) -> str:
    """The username a pod running as that ServiceAccount authenticates as."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


@dataclass(frozen=True, slots=True)
class RequestKey:
    """One kind of request one user made: RBAC's (verb, apiGroup, resource, namespace)."""

    username: str
    verb: str
    group: str
    resource: str  # with the subresource: `pods/binding`
    namespace: str  # "" for a cluster-scoped resource or an all-namespaces request


class Tokens:
    """Bearer tokens: one per user, made on first request for that user."""

    def __init__(self, admin_token: str) -> None:
        self._users = {admin_token: UserInfo.named(ADMIN)}
        self._tokens = {ADMIN: admin_token}

    def token_for(self, username: str) -> str:
        if username not in self._tokens:
            token = secrets.token_urlsafe(16)
            self._tokens[username] = token
            self._users[token] = UserInfo.named(username)
        return self._tokens[username]

    def user_of(self, authorization: str | None) -> UserInfo | None:
        """The user behind an `Authorization: Bearer …` header; None when it names nobody."""
        scheme, _, token = (authorization or "").partition(" ")
        return self._users.get(token) if scheme == "Bearer" else None
