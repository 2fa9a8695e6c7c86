"""Pod objects to the monitor's view: containers, allocations, MIG, bad annotations."""

import json

from pyhami.kube.views import read_pod
from pyhami.model import PodUID
from pyhami.monitor.pods import pod_view

from .builders import pod_object


def test_allocations_are_indexed_init_first() -> None:
    pod = pod_view(
        read_pod(
            pod_object(
                "p",
                "uid-1",
                ("app", "side"),
                init=("setup",),
                allocated="GPU-i,NVIDIA,100,10:;GPU-a,NVIDIA,2000,20:GPU-b,NVIDIA,3000,30:;;",
            )
        )
    )
    assert pod.uid == PodUID("uid-1") and pod.init_containers == ("setup",)
    assert [d.uuid for d in pod.devices_of("app")] == ["GPU-a", "GPU-b"]
    assert pod.devices_of("side") == ()
    assert pod.devices_of("setup") == (), "init containers never get usage series"
    assert pod.devices_of("nobody") == ()
    assert pod.container_at(0) == "setup" and pod.container_at(2) == "side"
    assert pod.container_at(3) is None and pod.container_at(-1) is None


def test_a_short_annotation_leaves_later_containers_without_devices() -> None:
    pod = pod_view(read_pod(pod_object("p", "u", ("a", "b"), allocated="GPU-a,NVIDIA,1,1:")))
    assert [d.uuid for d in pod.devices_of("a")] == ["GPU-a"] and pod.devices_of("b") == ()


def test_bad_annotations_are_treated_as_absent() -> None:
    pod = pod_view(read_pod(pod_object("p", "u", allocated="GPU-a,NVIDIA,lots,1:;", mig="[{")))
    assert pod.allocated == () and pod.mig == ()
    assert pod.devices_of("main") == ()


def test_mig_allocations_are_decoded() -> None:
    mig = [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-a",
            "profile": "1g.5gb",
            "placement": {"start": 0, "size": 1},
        }
    ]
    pod = pod_view(read_pod(pod_object("p", "u", mig=json.dumps(mig))))
    assert [(m.gpu_uuid, m.runtime_ready) for m in pod.mig] == [("GPU-a", False)]


def test_a_pod_without_spec_or_annotations_is_empty_not_an_error() -> None:
    pod = pod_view(read_pod({"metadata": {"name": "bare", "uid": "u"}}))
    assert pod.containers == () and pod.allocated == () and pod.namespace == "default"


def test_a_native_sidecar_gets_usage_series_like_an_app_container() -> None:
    """An init container with restartPolicy Always runs for the pod's life under libvgpu."""
    obj = pod_object(
        "p",
        "uid-1",
        ("app",),
        init=("setup", "proxy"),
        allocated="GPU-i,NVIDIA,100,10:;GPU-s,NVIDIA,500,0:;GPU-a,NVIDIA,2000,20:;",
    )
    obj["spec"]["initContainers"][1]["restartPolicy"] = "Always"
    pod = pod_view(read_pod(obj))
    assert pod.sidecars == ("proxy",)
    assert [d.uuid for d in pod.devices_of("proxy")] == ["GPU-s"]
    assert [d.uuid for d in pod.devices_of("app")] == ["GPU-a"]
    assert pod.devices_of("setup") == ()
