"""A scheduler outage (its admission webhooks down, failurePolicy Fail) does not fail the pods
that are starting: the chart's ownership webhook skips the device plugin's writes, and a
bind-phase that could not be written is written again once the API server takes it."""

import logging

import pytest

from pyhami.kube import KubeClient
from pyhami.sim.demo.cluster import DEVICE_PLUGIN_USER, WEBHOOKS

from .conftest import Node
from .test_component import LOCK, started

# What kube-apiserver answers when a Fail webhook cannot be reached.
WEBHOOK_DOWN = (
    'Internal error occurred: failed calling webhook "ownership.pyhami.io": failed to call '
    'webhook: Post "https://hami-scheduler.kube-system.svc:443/webhook/ownership": '
    "connect: connection refused"
)


async def test_the_plugin_finishes_a_bind_while_the_ownership_webhook_is_down(
    gpu_node: Node,
) -> None:
    """The chart's webhooks (the demo registers the same), their server down: the plugin, as
    its ServiceAccount, still writes to-allocate and bind-phase."""
    for hook in WEBHOOKS:
        # Nothing listens there: the scheduler is down.
        gpu_node.api.admission.register_pod_webhook(hook, "https://127.0.0.1:1")
    async with KubeClient(gpu_node.api.configuration(DEVICE_PLUGIN_USER)) as plugin_client:
        gpu_node.kube = plugin_client
        kubelet_plugin = await started(gpu_node)
        uuid = gpu_node.nvml.device_uuid(0)
        gpu_node.bind(gpu_node.scheduled_pod("starting", [("main", [(uuid, 100, 10)])]))
        await kubelet_plugin.admit_container(1)
        notes = gpu_node.pod_annotations("starting")
        assert notes["hami.io/bind-phase"] == "success"
        assert notes["hami.io/vgpu-devices-to-allocate"] == ";;"
        assert LOCK not in gpu_node.node_annotations()
        assert gpu_node.api.admission.calls == []  # every write skipped the dead webhook
        await gpu_node.stop()


async def test_a_bind_phase_refused_during_an_outage_is_written_once_it_can_be(
    gpu_node: Node,
) -> None:
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("starting", [("main", [(uuid, 100, 10)])]))
    # The to-allocate write lands; the bind-phase write and two retries meet the outage.
    gpu_node.api.faults.fail("patch", "pods", status=500, times=3, after=1, message=WEBHOOK_DOWN)
    await kubelet_plugin.admit_container(1)
    assert gpu_node.pod_annotations("starting")["hami.io/bind-phase"] == "allocating"
    assert LOCK not in gpu_node.node_annotations()  # the next pod need not wait
    await gpu_node.eventually(
        lambda: gpu_node.pod_annotations("starting")["hami.io/bind-phase"] == "success"
    )
    assert gpu_node.api.faults.injected == 3


async def test_the_repair_stops_when_the_pod_is_gone(
    gpu_node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyhami.deviceplugin.binding")
    kubelet_plugin = await started(gpu_node)
    uuid = gpu_node.nvml.device_uuid(0)
    gpu_node.bind(gpu_node.scheduled_pod("doomed", [("main", [(uuid, 100, 10)])]))
    gpu_node.api.faults.fail("patch", "pods", status=500, times=None, after=1, message=WEBHOOK_DOWN)
    await kubelet_plugin.admit_container(1)
    gpu_node.api.store.delete("pods", "default", "doomed")
    gpu_node.api.faults.clear()
    await gpu_node.eventually(lambda: "default/doomed is gone" in caplog.text)
