"""`hami_build_info`, as the scheduler and the monitor serve it."""

import platform
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pyhami import __version__


class BuildInfo(Collector):
    """`hami_build_info`; the Go-named labels keep their names and say what runs here."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "hami_build_info",
            "hami build metadata exposed as labels with a constant value of 1.",
            labels=("version", "revision", "build_date", "go_version", "compiler", "platform"),
        )
        runtime = (platform.python_implementation().lower(), platform.python_version())
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        family.add_metric(
            (__version__, "", "", f"python{runtime[1]}", runtime[0], f"linux/{arch}"), 1
        )
        yield family
