"""The webhook's DRA translation: HAMi-style GPU shares of pods headed to DRA nodes become
ResourceClaimTemplates with capacity requests; whole-GPU pods keep `nvidia.com/gpu` (the
DeviceClass maps it); nothing changes for pods the mode does not send to DRA nodes."""

from typing import Any

import pytest

from pyhami.devices.config import NvidiaConfig
from pyhami.kube import Forbidden, JsonObject
from pyhami.kube.admission_review import AdmissionResponse
from pyhami.kube.dra_manifests import ClaimTemplate
from pyhami.kube.dra_views import read_slice
from pyhami.scheduler.dra_cards import DraCardMemories
from pyhami.scheduler.webhook import PodAdmission, WebhookConfig

from .patching import apply_patch, review_request

DRA_SELECTOR = {"gpu.pyhami.io/mode": "dra"}


def _pod(*containers: JsonObject, annotations: dict[str, str] | None = None, **spec: Any) -> Any:
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": list(containers), **spec},
    }


def _ctr(name: str = "c", **limits: str) -> JsonObject:
    return {
        "name": name,
        "resources": {"limits": {f"nvidia.com/{k}": v for k, v in limits.items()}},
    }


def _admit(
    pod: JsonObject, mode: str = "selected", card_memories: frozenset[int] = frozenset()
) -> tuple[AdmissionResponse, JsonObject]:
    config = WebhookConfig(scheduler_name="hami-scheduler", dra_mode=mode)  # type: ignore[arg-type]
    admission = PodAdmission(
        config, NvidiaConfig(), lambda _: False, dra_card_memories=lambda: card_memories
    )
    request = review_request(pod)
    response = admission.review(request)
    return response, apply_patch(pod, [dict(op) for op in response.patch])


def test_a_share_headed_to_a_dra_node_becomes_a_claim_with_capacity_requests() -> None:
    pod = _pod(_ctr(gpu="1", gpumem="4096", gpucores="30"), nodeSelector=DRA_SELECTOR)
    response, mutated = _admit(pod)
    assert response.allowed
    [template] = response.claim_templates
    assert template.manifest()["kind"] == "ResourceClaimTemplate"
    assert template.manifest()["metadata"]["namespace"] == "ns"
    [request] = template.manifest()["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.pyhami.io",
        "allocationMode": "ExactCount",
        "count": 1,
        "capacity": {"requests": {"memory": str(4 * 1024**3), "cores": "30"}},
    }
    spec = mutated["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu-0", "resourceClaimTemplateName": template.name}]
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {}
    assert container["resources"]["claims"] == [{"name": "gpu-0"}]
    # kube-scheduler allocates claims: the pod keeps the default scheduler
    assert "schedulerName" not in spec


def test_a_memory_share_without_cores_has_no_sm_limit_as_in_hami() -> None:
    response, _ = _admit(_pod(_ctr(gpumem="2048"), nodeSelector=DRA_SELECTOR))
    [request] = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"] == {
        "requests": {"memory": str(2048 * 1024**2), "cores": "0"}
    }


def test_pods_asking_the_same_share_name_one_template() -> None:
    first, _ = _admit(_pod(_ctr(gpumem="2048"), nodeSelector=DRA_SELECTOR))
    second, _ = _admit(_pod(_ctr("other", gpumem="2048"), nodeSelector=DRA_SELECTOR))
    third, _ = _admit(_pod(_ctr(gpumem="1024"), nodeSelector=DRA_SELECTOR))
    names = [r.claim_templates[0].name for r in (first, second, third)]
    assert names[0] == names[1] != names[2]


def test_a_whole_gpu_pod_gets_a_claim_for_whole_cards_and_keeps_the_default_scheduler() -> None:
    # not the DeviceClass's extended resource: in a mixed cluster that mapping would make
    # kube-scheduler refuse every HAMi-style pod (gpumem is neither on the node nor DRA-backed)
    response, mutated = _admit(_pod(_ctr(gpu="2"), _ctr("sidecar")), mode="all")
    [template] = response.claim_templates
    [request] = template.manifest()["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.pyhami.io",
        "allocationMode": "ExactCount",
        "count": 2,
    }
    containers = mutated["spec"]["containers"]
    assert containers[0]["resources"] == {"limits": {}, "claims": [{"name": "gpu-0"}]}
    assert "claims" not in containers[1]["resources"]
    assert "schedulerName" not in mutated["spec"]


def test_outside_the_mode_a_pod_goes_to_the_extender_as_before() -> None:
    for mode, pod in [
        ("selected", _pod(_ctr(gpumem="4096"))),
        ("off", _pod(_ctr(gpumem="4096"), nodeSelector=DRA_SELECTOR)),
    ]:
        response, mutated = _admit(pod, mode=mode)
        assert not response.claim_templates
        assert mutated["spec"]["schedulerName"] == "hami-scheduler"
        assert "resourceClaims" not in mutated["spec"]


@pytest.mark.parametrize(
    "annotations, constraints",
    [
        ({"nvidia.com/numa-bind": "true"}, ["numaNode"]),
        ({"nvidia.com/numa-bind": "T"}, ["numaNode"]),  # Go ParseBool, as HAMi
        ({"nvidia.com/numa-bind": "false"}, []),
        ({"nvidia.com/numa-bind": "yes"}, []),
        (
            {"nvidia.com/numa-bind": "1", "gpu.pyhami.io/same-topology": "nvlink"},
            ["numaNode", "nvlinkDomain"],
        ),
        ({"gpu.pyhami.io/same-topology": "nvlink"}, ["nvlinkDomain"]),
    ],
)
def test_hamis_numa_bind_keeps_a_containers_cards_on_one_numa_node(
    annotations: dict[str, str], constraints: list[str]
) -> None:
    pod = _pod(_ctr(gpu="2"), annotations=annotations, nodeSelector=DRA_SELECTOR)
    response, _ = _admit(pod)
    devices = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]
    assert devices.get("constraints", []) == [
        {"requests": ["gpu"], "matchAttribute": f"gpu.pyhami.io/{name}"} for name in constraints
    ]


def test_one_card_needs_no_topology_constraint() -> None:
    pod = _pod(_ctr(gpu="1"), annotations={"nvidia.com/numa-bind": "true"})
    response, _ = _admit(pod, mode="all")
    assert "constraints" not in response.claim_templates[0].manifest()["spec"]["spec"]["devices"]


def test_card_type_and_uuid_annotations_become_selectors_on_every_request() -> None:
    annotations = {
        "nvidia.com/use-gputype": "A100",
        "nvidia.com/nouse-gpuuuid": "GPU-0",
    }
    pod = _pod(_ctr(gpumem="1024"), _ctr("second", gpu="1"), annotations=annotations)
    response, _ = _admit(pod, mode="all")
    for template in response.claim_templates:
        [request] = template.manifest()["spec"]["spec"]["devices"]["requests"]
        expressions = [s["cel"]["expression"] for s in request["exactly"]["selectors"]]
        assert expressions[0].startswith('["A100"].exists(t, ')
        assert expressions[1] == '!(device.attributes["gpu.pyhami.io"].uuid in ["GPU-0"])'


GIB = 1024**3


def test_a_memory_percentage_is_an_alternative_per_card_size_with_hamis_rounding() -> None:
    pod = _pod(_ctr(gpu="1", **{"gpumem-percentage": "33"}), nodeSelector=DRA_SELECTOR)
    sizes = frozenset({80 * GIB, 24 * GIB, 40 * GIB})
    response, mutated = _admit(pod, card_memories=sizes)
    assert response.allowed
    [request] = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]["requests"]
    alternatives = request["firstAvailable"]
    assert [a["name"] for a in alternatives] == ["card-24576mib", "card-40960mib", "card-81920mib"]
    # 33 % of 24576 MiB is 8110.08 MiB: HAMi truncates
    assert [a["capacity"]["requests"] for a in alternatives] == [
        {"memory": str(mib * 1024**2), "cores": "0"} for mib in (8110, 13516, 27033)
    ]
    assert mutated["spec"]["containers"][0]["resources"]["limits"] == {}


def test_gpumem_wins_over_a_percentage_and_whole_percentages_are_the_whole_card() -> None:
    both = _pod(_ctr(gpumem="1024", **{"gpumem-percentage": "50"}), nodeSelector=DRA_SELECTOR)
    response, _ = _admit(both)  # no slice known: the percentage is not needed
    [request] = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"]["memory"] == str(1024 * 1024**2)
    whole = _pod(_ctr(**{"gpumem-percentage": "100"}), nodeSelector=DRA_SELECTOR)
    response, _ = _admit(whole)
    [request] = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]["requests"]
    assert "capacity" not in request["exactly"]


def test_more_card_sizes_than_a_request_has_alternatives_is_refused() -> None:
    pod = _pod(_ctr(**{"gpumem-percentage": "50"}), nodeSelector=DRA_SELECTOR)
    response, _ = _admit(pod, card_memories=frozenset(n * GIB for n in range(1, 10)))
    assert not response.allowed
    assert "9 memory sizes, more than the 8 alternatives" in response.message


def test_multi_gpu_claims_keep_their_cards_on_one_numa_node_when_asked() -> None:
    pod = _pod(
        _ctr(gpu="2", gpumem="8192"),
        annotations={"gpu.pyhami.io/same-topology": "numa"},
        nodeSelector=DRA_SELECTOR,
    )
    response, _ = _admit(pod)
    devices = response.claim_templates[0].manifest()["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["count"] == 2
    assert devices["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.pyhami.io/numaNode"}
    ]


@pytest.mark.parametrize(
    "pod, why",
    [
        pytest.param(
            _pod(_ctr(**{"gpumem-percentage": "50"}), nodeSelector=DRA_SELECTOR),
            "gpumem-percentage=50: no GPU of the DRA driver is known yet (no ResourceSlice)",
            id="percentage-before-any-slice",
        ),
        pytest.param(
            _pod(
                _ctr(gpumem="1024"),
                annotations={"gpu.pyhami.io/same-topology": "rack"},
                nodeSelector=DRA_SELECTOR,
            ),
            "gpu.pyhami.io/same-topology='rack'",
            id="unknown-topology",
        ),
        pytest.param(
            _pod(
                {**_ctr(gpumem="1024"), "securityContext": {"privileged": True}},
                nodeSelector=DRA_SELECTOR,
            ),
            "container c is privileged",
            id="privileged",
        ),
        pytest.param(
            _pod(
                {**_ctr(gpumem="1024"), "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "1"}]},
                nodeSelector=DRA_SELECTOR,
            ),
            "env CUDA_DISABLE_CONTROL controls libvgpu",
            id="limit-control-env",
        ),
    ],
)
def test_what_has_no_dra_form_or_is_not_allowed_is_refused_naming_why(
    pod: JsonObject, why: str
) -> None:
    response, _ = _admit(pod)
    assert not response.allowed
    assert why in response.message


async def test_templates_are_created_before_the_answer_and_a_failure_refuses_the_pod() -> None:
    created: list[ClaimTemplate] = []

    async def ensure(template: ClaimTemplate) -> None:
        created.append(template)

    response, _ = _admit(_pod(_ctr(gpumem="1024"), nodeSelector=DRA_SELECTOR))
    config = WebhookConfig(dra_mode="selected")
    admission = PodAdmission(config, NvidiaConfig(), lambda _: False, ensure_object=ensure)
    assert await response.create_claim_templates(admission.ensure_object) is response
    assert created == list(response.claim_templates)

    async def refuse(template: ClaimTemplate) -> None:
        raise Forbidden(403, "Forbidden", "the API server says no")

    refusing = PodAdmission(config, NvidiaConfig(), lambda _: False, ensure_object=refuse)
    answer = await response.create_claim_templates(refusing.ensure_object)
    assert not answer.allowed and answer.code == 500
    assert "cannot create ResourceClaimTemplate pyhami-gpu-" in answer.message


def _slice(name: str, driver: str, *memories: str) -> JsonObject:
    devices = [
        {"name": f"gpu-{i}", "capacity": {"memory": {"value": m}}} for i, m in enumerate(memories)
    ]
    return {"metadata": {"name": name}, "spec": {"driver": driver, "devices": devices}}


def test_card_sizes_follow_the_drivers_slices() -> None:
    cards = DraCardMemories()
    cards.on_slice(read_slice(_slice("a", "gpu.pyhami.io", "80Gi", str(80 * GIB))))
    cards.on_slice(read_slice(_slice("b", "gpu.pyhami.io", "40Gi")))
    cards.on_slice(read_slice(_slice("other", "gpu.example.com", "16Gi")))
    assert cards.sizes() == {80 * GIB, 40 * GIB}
    # an update replaces the slice's sizes
    cards.on_slice(read_slice(_slice("b", "gpu.pyhami.io", "24Gi")))
    assert cards.sizes() == {80 * GIB, 24 * GIB}
    cards.on_slice_deleted(read_slice(_slice("a", "gpu.pyhami.io")))
    assert cards.sizes() == {24 * GIB}
