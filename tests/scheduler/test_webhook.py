"""Webhook decisions and the owned-annotation rule."""

import copy
from typing import Any

import pytest

from pyhami.devices.config import NvidiaConfig
from pyhami.kube.admission_review import AdmissionRequest, AdmissionResponse
from pyhami.model import PodView
from pyhami.scheduler.webhook import PodAdmission, WebhookConfig

from .patching import apply_patch, review_request

OWNED = frozenset(
    {
        "hami.io/vgpu-node",
        "hami.io/vgpu-time",
        "hami.io/bind-phase",
        "hami.io/bind-time",
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
    }
)


def Nvidia(**fields: Any) -> NvidiaConfig:
    return NvidiaConfig(**fields)


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {}},
        "spec": {"containers": list(containers), **spec},
    }


def _ctr(name: str = "c", limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits or {}}, **extra}


def _review(
    pod: dict[str, Any],
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice",
) -> AdmissionRequest:
    return review_request(pod, operation, old, user)


def _admit(
    pod: dict[str, Any], nvidia: NvidiaConfig | None = None, over_quota: bool = False, **cfg: Any
) -> tuple[AdmissionResponse, dict[str, Any]]:
    config = WebhookConfig(
        scheduler_name="hami-scheduler",
        owned_annotations=OWNED,
        trusted_writers=("system:serviceaccount:hami:",),
        **cfg,
    )
    admission = PodAdmission(config, nvidia or Nvidia(), lambda _: over_quota)
    response = admission.review(_review(copy.deepcopy(pod)))
    return response, _apply(pod, response)


def _apply(pod: dict[str, Any], response: AdmissionResponse) -> dict[str, Any]:
    return apply_patch(pod, [dict(op) for op in response.patch])


def test_count_only_container_becomes_whole_card_and_takes_our_scheduler() -> None:
    response, pod = _admit(_pod(_ctr(limits={"nvidia.com/gpu": "1"})))
    assert response.allowed
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"


@pytest.mark.parametrize(
    "limits, want_count, want_cores",
    [
        pytest.param({"nvidia.com/gpumem": "3000"}, "1", None, id="mem-only-gets-count"),
        pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, "1", None, id="shared"),
        pytest.param(
            {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"},
            "2",
            "100",
            id="percentage-100-exclusive",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
            "1",
            None,
            id="percentage-50-shared",
        ),
        pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}, "1", "30", id="cores"),
    ],
)
def test_count_and_core_defaulting(
    limits: dict[str, str], want_count: str, want_cores: str | None
) -> None:
    _, pod = _admit(_pod(_ctr(limits=limits)))
    got = pod["spec"]["containers"][0]["resources"]["limits"]
    assert got.get("nvidia.com/gpu") == want_count
    assert got.get("nvidia.com/gpucores") == want_cores


def test_env_injection_priority_policy_and_runtime_class() -> None:
    nvidia = Nvidia(gpu_core_policy="force", runtime_class_name="nvidia", overwrite_env=True)
    pod = _pod(_ctr("gpu", {"nvidia.com/gpu": "1", "nvidia.com/priority": "1"}), _ctr("plain"))
    _, out = _admit(pod, nvidia)
    gpu, plain = out["spec"]["containers"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in gpu["env"]
    assert {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"} in gpu["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in plain["env"]
    assert out["spec"]["runtimeClassName"] == "nvidia"


@pytest.mark.parametrize(
    "pod, code, words",
    [
        pytest.param(_pod(), 403, "pod has no containers", id="no-containers"),
        pytest.param(
            _pod(_ctr(limits={"nvidia.com/gpu": "1"}, securityContext={"privileged": True})),
            403,
            "container c is privileged",
            id="privileged",
        ),
        pytest.param(
            _pod(_ctr(limits={"nvidia.com/gpu": "1"}), nodeName="n1"),
            403,
            "pod has node assigned",
            id="node-name",
        ),
        pytest.param(
            _pod(_ctr(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"})),
            403,
            "container 'c': resources.limits[nvidia.com/gpumem-percentage] '101' is out of range: "
            "it must be an integer from 0 to 100 (percent of each GPU's memory)",
            id="bad-percentage",
        ),
        pytest.param({"metadata": {}}, 500, "pod has no spec", id="no-spec"),
        pytest.param(
            _pod(_ctr(limits={"nvidia.com/gpu": "1", "nvidia.com/priority": "high"})),
            403,
            "container 'c': resources.limits[nvidia.com/priority] 'high' is not a number; it must "
            "be an integer from 0 to 1 (0 high, 1 low)",
            id="bad-quantity",
        ),
        pytest.param(_pod("not-a-container"), 500, "must be a list of containers", id="bad-list"),
    ],
)
def test_rejections(pod: dict[str, Any], code: int, words: str) -> None:
    response, _ = _admit(pod)
    assert not response.allowed and response.code == code and words in response.message


def test_quota_overrun_is_denied_only_for_gpu_pods() -> None:
    response, _ = _admit(_pod(_ctr(limits={"nvidia.com/gpu": "1"})), over_quota=True)
    assert response.message == "exceeding resource quota" and not response.allowed
    response, _ = _admit(_pod(_ctr()), over_quota=True)
    assert response.allowed


def test_the_quota_check_sees_the_limits_the_webhook_sets_on_a_generated_pod() -> None:
    seen: list[PodView] = []
    config = WebhookConfig(scheduler_name="hami-scheduler", owned_annotations=OWNED)
    admission = PodAdmission(config, Nvidia(), lambda pod: seen.append(pod) or False)
    pod = _pod(_ctr(limits={"nvidia.com/gpu": "1"}))
    pod["metadata"] = {"generateName": "job-"}
    assert admission.review(_review(pod)).allowed
    [view] = seen
    assert view.ref == "ns/job-"
    assert view.containers[0].limits == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}


def test_other_schedulers_are_left_alone_but_default_is_taken() -> None:
    gpu = _ctr(limits={"nvidia.com/gpu": "1"})
    response, pod = _admit(_pod(gpu, schedulerName="volcano"))
    assert response.message == "pod already has different scheduler assigned"
    assert pod["spec"]["schedulerName"] == "volcano"
    _, pod = _admit(_pod(gpu, schedulerName="default-scheduler"))
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    _, pod = _admit(
        _pod(gpu, schedulerName="default-scheduler"), force_overwrite_default_scheduler=False
    )
    assert pod["spec"]["schedulerName"] == "default-scheduler"


def test_scheduler_owned_annotations_are_removed_on_create() -> None:
    pod = _pod(_ctr(limits={"nvidia.com/gpu": "1"}), schedulerName="volcano")
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,1,0:;",
        "hami.io/vgpu-node": "n1",
        "nvidia.com/use-gpuuuid": "GPU-x",
    }
    pod["metadata"]["labels"] = {"hami.io/vgpu-node": "n1", "app": "x"}
    response, out = _admit(pod)
    assert response.allowed
    assert out["metadata"]["annotations"] == {"nvidia.com/use-gpuuuid": "GPU-x"}
    assert out["metadata"]["labels"] == {"app": "x"}
    assert response.warnings == [
        "removed scheduler-owned annotation hami.io/vgpu-devices-allocated",
        "removed scheduler-owned annotation hami.io/vgpu-node",
        "removed scheduler-owned label hami.io/vgpu-node",
    ]


def test_updates_to_owned_annotations_need_a_trusted_writer() -> None:
    config = WebhookConfig(
        owned_annotations=OWNED, trusted_writers=("system:serviceaccount:hami:",)
    )
    admission = PodAdmission(config, Nvidia(), lambda _: False)
    old = _pod(_ctr())
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["hami.io/bind-phase"] = "success"
    denied = admission.review(_review(new, "UPDATE", old, user="alice"))
    assert not denied.allowed
    assert denied.message == (
        "annotation hami.io/bind-phase may be changed by the scheduler and the device plugin "
        "only; alice is not a trusted annotation writer (scheduler flag "
        "--trusted-annotation-writer)"
    )
    relabelled = copy.deepcopy(old)
    relabelled["metadata"].setdefault("labels", {})["hami.io/vgpu-node"] = "elsewhere"
    denied = admission.review(_review(relabelled, "UPDATE", old, user="alice"))
    assert not denied.allowed and denied.message.startswith("label hami.io/vgpu-node may")
    allowed = admission.review(
        _review(new, "UPDATE", old, user="system:serviceaccount:hami:hami-device-plugin")
    )
    assert allowed.allowed
    unrelated = copy.deepcopy(old)
    unrelated["metadata"]["annotations"]["team"] = "a"
    assert admission.review(_review(unrelated, "UPDATE", old)).allowed


def test_the_ownership_review_strips_and_guards_but_mutates_nothing() -> None:
    """The second webhook, registered without HAMi's `hami.io/webhook: ignore` selector."""
    config = WebhookConfig(
        scheduler_name="hami-scheduler",
        owned_annotations=OWNED,
        trusted_writers=("system:serviceaccount:hami:",),
    )
    admission = PodAdmission(config, Nvidia(), lambda _: True)  # quota: would refuse
    forged = _pod(_ctr(limits={"nvidia.com/gpu": "1"}), nodeName="n1")
    forged["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    forged["metadata"]["annotations"] = {"hami.io/vgpu-devices-to-allocate": "GPU-x,NVIDIA,1,0:;"}
    response = admission.review_ownership(_review(copy.deepcopy(forged)))
    assert response.allowed
    assert response.warnings == [
        "removed scheduler-owned annotation hami.io/vgpu-devices-to-allocate"
    ]
    stripped = _apply(forged, response)
    assert stripped["metadata"]["annotations"] == {}
    assert stripped["spec"] == forged["spec"], "no scheduler, no limits, no refusal"
    plain = _pod(_ctr(limits={"nvidia.com/gpu": "1"}))
    assert list(admission.review_ownership(_review(plain)).patch) == []

    running = _pod(_ctr())
    running["metadata"]["annotations"] = {"hami.io/bind-phase": "allocating"}
    hidden = copy.deepcopy(running)
    del hidden["metadata"]["annotations"]["hami.io/bind-phase"]
    refused = admission.review_ownership(_review(hidden, "UPDATE", running, user="alice"))
    assert not refused.allowed and "hami.io/bind-phase" in refused.message
    plugin = "system:serviceaccount:hami:pyhami-device-plugin"
    assert admission.review_ownership(_review(hidden, "UPDATE", running, user=plugin)).allowed
    assert admission.review_ownership(_review(running, "DELETE")).allowed


def test_patch_is_empty_when_nothing_changes() -> None:
    response, _ = _admit(_pod(_ctr()))
    assert response.allowed and list(response.patch) == []
    assert b"patch" not in response.encode_review(_review(_pod(_ctr())))


def test_the_webhooks_own_libvgpu_env_is_admitted_again_and_not_repeated() -> None:
    """A pod copied from a running one carries the env the webhook wrote: it passes, once."""
    nvidia = Nvidia(gpu_core_policy="force")
    limits = {"nvidia.com/gpu": "1", "nvidia.com/priority": "1"}
    _, admitted = _admit(_pod(_ctr(limits=limits)), nvidia)
    response, again = _admit(admitted, nvidia)
    assert response.allowed
    assert again["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_TASK_PRIORITY", "value": "1"},
        {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"},
    ]
    forged = copy.deepcopy(admitted)
    forged["spec"]["containers"][0]["env"][1]["value"] = "disable"
    refused, _ = _admit(forged, nvidia)
    assert refused.code == 403
    assert refused.message.startswith(
        "container 'c': env GPU_CORE_UTILIZATION_POLICY controls libvgpu"
    )


@pytest.mark.parametrize(
    "name",
    [
        "CUDA_DISABLE_CONTROL",
        "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_3",
        "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_SM_LIMIT_0",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "CUDA_OVERSUBSCRIBE",
        "LIBCUDA_LOG_LEVEL",
        "CUDA_TASK_PRIORITY",
        "GPU_CORE_UTILIZATION_POLICY",
    ],
)
def test_every_variable_that_controls_libvgpu_is_refused_in_a_gpu_container(name: str) -> None:
    gpu = _ctr(limits={"nvidia.com/gpu": "1"}, env=[{"name": name, "value": "0"}])
    response, _ = _admit(_pod(gpu))
    assert response.code == 403
    assert f"env {name} controls libvgpu" in response.message
    allowed, _ = _admit(_pod(gpu), limit_control_namespaces=frozenset({"ns"}))
    assert allowed.allowed
