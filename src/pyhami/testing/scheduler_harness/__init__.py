"""KubeSchedulerHarness: drives a scheduler extender the way kube-scheduler does."""

from pyhami.testing.scheduler_harness.config import (
    HAMI_NVIDIA_RESOURCES,
    ExtenderConfig,
    ManagedResource,
)
from pyhami.testing.scheduler_harness.harness import KubeSchedulerHarness
from pyhami.testing.scheduler_harness.outcomes import HarnessMetrics, Result, ScheduleOutcome

__all__ = [
    "HAMI_NVIDIA_RESOURCES",
    "ExtenderConfig",
    "HarnessMetrics",
    "KubeSchedulerHarness",
    "ManagedResource",
    "Result",
    "ScheduleOutcome",
]
