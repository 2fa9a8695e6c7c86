"""Doubles shipped with the package: the tests and the demo use the same ones."""

from pyhami.testing.clock import ManualClock
from pyhami.testing.fake_apiserver import FakeKubeAPIServer
from pyhami.testing.fake_kubelet import FakeKubelet
from pyhami.testing.fake_nvml import FakeGpu, FakeNVML
from pyhami.testing.scheduler_harness import ExtenderConfig, KubeSchedulerHarness

__all__ = [
    "ExtenderConfig",
    "FakeGpu",
    "FakeKubeAPIServer",
    "FakeKubelet",
    "FakeNVML",
    "KubeSchedulerHarness",
    "ManualClock",
]
