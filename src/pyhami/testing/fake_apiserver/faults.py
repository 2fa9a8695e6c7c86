"""Fault hooks: make chosen requests slow or fail, the way a loaded or broken apiserver does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pyhami.testing.fake_apiserver.status import injected

VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)


@dataclass(slots=True)
class Fault:
    """Matches requests by verb and resource (None = any); `times` None means forever."""

    verb: str | None
    resource: str | None
    status: int | None
    latency_s: float
    times: int | None
    message: str
    after: int = 0  # this many matching requests pass untouched first

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verb in (None, verb)) and (self.resource in (None, resource))


class FaultInjector:
    """Faults are checked in the order they were added; each matching one applies."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self.injected = 0

    @staticmethod
    def _check_verb(verb: str | None) -> None:
        if verb is not None and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; expected one of {sorted(VERBS)}")

    def fail(
        self,
        verb: str | None,
        resource: str | None,
        *,
        status: int = 500,
        times: int | None = 1,
        message: str = "",
        after: int = 0,
    ) -> Fault:
        """Answer the next `times` matching requests with an error Status of `status`, once
        `after` matching requests have been served.

        `resource` is the plural with any subresource (`pods`, `pods/binding`, `leases`)."""
        self._check_verb(verb)
        if not 400 <= status <= 599:
            raise ValueError(f"an injected error needs a 4xx or 5xx status, got {status}")
        fault = Fault(
            verb,
            resource,
            status,
            0.0,
            times,
            message or f"injected failure for {verb or 'any verb'} on {resource or 'any resource'}",
            after,
        )
        self._faults.append(fault)
        return fault

    def delay(
        self,
        seconds: float,
        verb: str | None = None,
        resource: str | None = None,
        *,
        times: int | None = None,
    ) -> Fault:
        """Hold matching requests for `seconds` before serving them."""
        self._check_verb(verb)
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        fault = Fault(verb, resource, None, seconds, times, "")
        self._faults.append(fault)
        return fault

    def active(self) -> list[Fault]:
        """The faults still waiting to apply (a used-up one is gone)."""
        return list(self._faults)

    def clear(self) -> None:
        self._faults.clear()

    async def before(self, verb: str, resource: str) -> None:
        """Called by the server before it serves a request; raises the injected error."""
        error = None
        for fault in list(self._faults):
            if not fault.matches(verb, resource):
                continue
            if fault.after > 0:
                fault.after -= 1
                continue
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
            if fault.latency_s:
                await asyncio.sleep(fault.latency_s)
            if fault.status is not None and error is None:
                error = injected(fault.status, fault.message)
        if error is not None:
            self.injected += 1
            raise error
