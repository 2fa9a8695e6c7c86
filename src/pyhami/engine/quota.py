"""ResourceQuota limits on NVIDIA memory and cores per namespace.

Limits come from `spec.hard["limits.<memory or core resource name>"]`; `requests.*`, bare names
and the count resource are ignored, as in HAMi. Usage is the ledger's own accounting.

Deviation (a HAMi bug fixed): with several ResourceQuota objects in one namespace HAMi keeps the
last one written and forgets the limit when any one is deleted. Kubernetes enforces every quota,
so here the tightest limit of the namespace's quotas applies and deleting one keeps the others.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from pyhami.devices.config import NvidiaConfig
from pyhami.devices.quantity import QuantityError, as_int64, parse_quantity

LIMITS_PREFIX = "limits."


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """A namespace's limits; None means that resource is not limited."""

    memory: int | None = None
    cores: int | None = None

    def fits(self, used: tuple[int, int], memory: int, cores: int, memory_factor: int) -> bool:
        """HAMi `FitQuota`: memory limits are in requested units, scaled by the memory factor."""
        used_memory, used_cores = used
        factor = memory_factor if memory_factor > 1 else 1
        if self.memory is not None and used_memory + memory > self.memory * factor:
            return False
        return self.cores is None or used_cores + cores <= self.cores


class QuotaBook:
    """The ResourceQuota objects the scheduler has seen, reduced to NVIDIA limits."""

    def __init__(self, config: NvidiaConfig) -> None:
        self._memory_key = LIMITS_PREFIX + config.resource_memory_name
        self._core_key = LIMITS_PREFIX + config.resource_core_name
        self._quotas: dict[str, tuple[str, QuotaLimit]] = {}
        self._limits: dict[str, QuotaLimit] = {}

    def set_quota(self, key: str, namespace: str, hard: Mapping[str, object]) -> None:
        """Add or replace one ResourceQuota (`key`: its uid or namespace/name)."""
        previous = self._quotas.pop(key, None)
        limit = QuotaLimit(self._limit(hard, self._memory_key), self._limit(hard, self._core_key))
        if limit.memory is not None or limit.cores is not None:
            self._quotas[key] = (namespace, limit)
        self._recompute(namespace)
        if previous is not None and previous[0] != namespace:
            self._recompute(previous[0])

    def remove_quota(self, key: str) -> None:
        previous = self._quotas.pop(key, None)
        if previous is not None:
            self._recompute(previous[0])

    def limit(self, namespace: str) -> QuotaLimit | None:
        """The namespace's effective limits, or None when nothing is limited there."""
        return self._limits.get(namespace)

    def _recompute(self, namespace: str) -> None:
        limits = [limit for ns, limit in self._quotas.values() if ns == namespace]
        if not limits:
            self._limits.pop(namespace, None)
            return
        memories = [limit.memory for limit in limits if limit.memory is not None]
        cores = [limit.cores for limit in limits if limit.cores is not None]
        self._limits[namespace] = QuotaLimit(
            min(memories) if memories else None, min(cores) if cores else None
        )

    @staticmethod
    def _limit(hard: Mapping[str, object], key: str) -> int | None:
        if key not in hard:
            return None
        try:
            return as_int64(parse_quantity(hard[key]))
        except QuantityError:
            return None  # the API server would not have stored it; nothing to enforce
