"""CRUD, resourceVersion and Status semantics of the fake API server, over raw HTTP.

Expected shapes follow the Kubernetes API concepts page ("Resource versions", "Efficient
detection of changes", "Server-side apply" / PATCH) and the Status kind in meta/v1.
"""

import pytest

from pyhami.testing import FakeKubeAPIServer

from .builders import Http, node, pod

PODS = "/api/v1/namespaces/default/pods"


async def test_create_assigns_uid_version_timestamp_and_defaults(http: Http) -> None:
    status, created = await http.post(PODS, pod("a"))
    assert status == 201
    meta = created["metadata"]
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["resourceVersion"].isdigit() and meta["generation"] == 1
    assert meta["namespace"] == "default"
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert created["status"]["phase"] == "Pending"


async def test_resource_version_is_global_and_monotonic(http: Http) -> None:
    _, first = await http.post(PODS, pod("a"))
    _, second = await http.post("/api/v1/nodes", node("n1"))
    _, third = await http.post(PODS, pod("b"))
    versions = [int(o["metadata"]["resourceVersion"]) for o in (first, second, third)]
    assert versions == sorted(versions) and len(set(versions)) == 3


async def test_get_missing_is_a_not_found_status(http: Http) -> None:
    status, body = await http.get(f"{PODS}/nope")
    assert status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }


async def test_grouped_not_found_names_the_group(http: Http) -> None:
    status, body = await http.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/x")
    assert status == 404
    assert body["message"] == 'leases.coordination.k8s.io "x" not found'
    assert body["details"] == {"name": "x", "group": "coordination.k8s.io", "kind": "leases"}


async def test_duplicate_create_is_already_exists(http: Http) -> None:
    await http.post(PODS, pod("a"))
    status, body = await http.post(PODS, pod("a"))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'pods "a" already exists'


async def test_create_in_missing_namespace_is_not_found(http: Http) -> None:
    status, body = await http.post("/api/v1/namespaces/ghost/pods", pod("a"))
    assert status == 404 and body["message"] == 'namespaces "ghost" not found'


async def test_generate_name(http: Http) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "job-"}
    status, created = await http.post(PODS, body)
    assert status == 201
    name = created["metadata"]["name"]
    assert name.startswith("job-") and len(name) == len("job-") + 5


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(lambda p: p["spec"].pop("containers"), "spec.containers", id="no-containers"),
        pytest.param(
            lambda p: p["spec"]["containers"][0].pop("image"),
            "spec.containers[0].image",
            id="no-image",
        ),
        pytest.param(
            lambda p: p["metadata"].update(name="Bad_Name"), "metadata.name", id="bad-name"
        ),
    ],
)
async def test_invalid_pod_is_422_with_causes(http: Http, mutate, field: str) -> None:
    body = pod("a")
    mutate(body)
    status, answer = await http.post(PODS, body)
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["details"]["kind"] == "Pod"
    assert [c["field"] for c in answer["details"]["causes"]] == [field]


async def test_stale_resource_version_in_update_is_conflict(http: Http) -> None:
    _, created = await http.post(PODS, pod("a"))
    fresh = dict(created)
    fresh["metadata"] = {**created["metadata"], "labels": {"x": "1"}}
    status, updated = await http.put(f"{PODS}/a", fresh)
    assert status == 200
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    status, body = await http.put(f"{PODS}/a", fresh)  # carries the old version again
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "a": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )


async def test_update_without_resource_version_is_unconditional(http: Http) -> None:
    _, created = await http.post(PODS, pod("a"))
    created["metadata"].pop("resourceVersion")
    created["metadata"]["labels"] = {"y": "2"}
    status, updated = await http.put(f"{PODS}/a", created)
    assert status == 200 and updated["metadata"]["labels"] == {"y": "2"}


async def test_stale_resource_version_in_merge_patch_is_conflict(http: Http) -> None:
    _, created = await http.post("/api/v1/nodes", node("n1"))
    version = created["metadata"]["resourceVersion"]
    lock = {
        "metadata": {"annotations": {"hami.io/mutex.lock": "t,ns,p"}, "resourceVersion": version}
    }
    assert (await http.patch("/api/v1/nodes/n1", lock))[0] == 200
    status, body = await http.patch("/api/v1/nodes/n1", lock)
    assert (status, body["reason"]) == (409, "Conflict")


async def test_noop_patch_keeps_the_version(http: Http) -> None:
    _, created = await http.post(PODS, pod("a", labels={"k": "v"}))
    status, patched = await http.patch(f"{PODS}/a", {"metadata": {"labels": {"k": "v"}}})
    assert status == 200
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_merge_patch_adds_and_removes_annotations(http: Http) -> None:
    await http.post(PODS, pod("a"))
    await http.patch(f"{PODS}/a", {"metadata": {"annotations": {"a": "1", "b": "2"}}})
    _, patched = await http.patch(f"{PODS}/a", {"metadata": {"annotations": {"a": None}}})
    assert patched["metadata"]["annotations"] == {"b": "2"}


async def test_json_patch_and_failing_test_op(http: Http) -> None:
    await http.post(PODS, pod("a"))
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "1"}},
        {"op": "replace", "path": "/metadata/annotations/x~1y", "value": "2"},
    ]
    status, patched = await http.patch(f"{PODS}/a", ops, "application/json-patch+json")
    assert status == 200 and patched["metadata"]["annotations"] == {"x/y": "2"}
    failing = [{"op": "test", "path": "/metadata/annotations/x~1y", "value": "nope"}]
    status, body = await http.patch(f"{PODS}/a", failing, "application/json-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")


async def test_strategic_merge_patch_merges_containers_by_name(http: Http) -> None:
    body = pod("a")
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    await http.post(PODS, body)
    patch = {"spec": {"containers": [{"name": "side", "image": "new"}]}}
    status, patched = await http.patch(f"{PODS}/a", patch, "application/strategic-merge-patch+json")
    assert status == 200, patched
    images = {c["name"]: c["image"] for c in patched["spec"]["containers"]}
    assert images == {"main": "busybox", "side": "new"}
    # The same body as a merge patch replaces the whole list, which a pod may not do.
    status, _ = await http.patch(f"{PODS}/a", patch)
    assert status == 422


async def test_strategic_merge_patch_of_status_conditions_merges_by_type(http: Http) -> None:
    await http.post("/api/v1/nodes", node("n1"))
    patch = {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}
    status, patched = await http.patch(
        "/api/v1/nodes/n1/status", patch, "application/strategic-merge-patch+json"
    )
    assert status == 200
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Ready", "MemoryPressure"]
    delete = {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}
    _, patched = await http.patch(
        "/api/v1/nodes/n1/status", delete, "application/strategic-merge-patch+json"
    )
    assert [c["type"] for c in patched["status"]["conditions"]] == ["MemoryPressure"]


async def test_unknown_patch_type_is_415(http: Http) -> None:
    await http.post(PODS, pod("a"))
    status, body = await http.patch(f"{PODS}/a", {}, "application/apply-patch+yaml")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


async def test_pod_spec_is_immutable_through_update(http: Http) -> None:
    await http.post(PODS, pod("a"))
    status, body = await http.patch(f"{PODS}/a", {"spec": {"nodeName": "n1"}})
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "spec"


async def test_status_subresource_changes_only_status(http: Http) -> None:
    await http.post(PODS, pod("a"))
    patch = {"metadata": {"labels": {"ignored": "yes"}}, "status": {"phase": "Running"}}
    status, patched = await http.patch(f"{PODS}/a/status", patch)
    assert status == 200
    assert patched["status"]["phase"] == "Running"
    assert "ignored" not in (patched["metadata"].get("labels") or {})
    # ... and the main resource ignores status.
    _, again = await http.patch(f"{PODS}/a", {"status": {"phase": "Failed"}})
    assert again["status"]["phase"] == "Running"


async def test_binding_sets_node_and_refuses_a_bound_pod(http: Http) -> None:
    await http.post(PODS, pod("a"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    status, body = await http.post(f"{PODS}/a/binding", binding)
    assert (status, body["status"]) == (201, "Success")
    _, bound = await http.get(f"{PODS}/a")
    assert bound["spec"]["nodeName"] == "n1"
    assert any(
        c["type"] == "PodScheduled" and c["status"] == "True" for c in bound["status"]["conditions"]
    )
    status, body = await http.post(f"{PODS}/a/binding", {**binding, "target": {"name": "n2"}})
    assert (status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n1"'
    )
    assert body["details"] == {"name": "a", "kind": "pods/binding"}


async def test_binding_through_the_legacy_collection_and_uid_precondition(http: Http) -> None:
    _, created = await http.post(PODS, pod("a"))
    wrong = {"metadata": {"name": "a", "uid": "not-the-uid"}, "target": {"name": "n1"}}
    status, body = await http.post("/api/v1/namespaces/default/bindings", wrong)
    assert status == 409 and "Precondition failed: UID in precondition" in body["message"]
    right = {"metadata": {"name": "a", "uid": created["metadata"]["uid"]}, "target": {"name": "n1"}}
    assert (await http.post("/api/v1/namespaces/default/bindings", right))[0] == 201


async def test_unbound_pod_delete_is_immediate(http: Http) -> None:
    await http.post(PODS, pod("a"))
    status, body = await http.delete(f"{PODS}/a")
    assert status == 200 and body["metadata"]["name"] == "a"
    assert (await http.get(f"{PODS}/a"))[0] == 404


async def test_bound_pod_delete_is_graceful(http: Http, apiserver: FakeKubeAPIServer) -> None:
    await http.post(PODS, pod("a", node="n1"))
    status, body = await http.delete(f"{PODS}/a")
    assert status == 200
    assert body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30
    assert (await http.get(f"{PODS}/a"))[0] == 200  # still there, terminating
    await http.delete(f"{PODS}/a", {"gracePeriodSeconds": 0})
    assert (await http.get(f"{PODS}/a"))[0] == 404


async def test_graceful_delete_finishes_by_itself(http: Http) -> None:
    import asyncio

    await http.post(PODS, pod("a", node="n1"))
    await http.delete(f"{PODS}/a")
    for _ in range(50):
        if (await http.get(f"{PODS}/a"))[0] == 404:
            return
        await asyncio.sleep(0.02)
    pytest.fail("a terminating pod was never removed")


async def test_delete_precondition_mismatch(http: Http) -> None:
    await http.post(PODS, pod("a"))
    status, body = await http.delete(f"{PODS}/a", {"preconditions": {"uid": "other"}})
    assert (status, body["reason"]) == (409, "Conflict")


async def test_list_has_version_and_selectors(http: Http) -> None:
    await http.post(PODS, pod("a", labels={"app": "x", "tier": "web"}, node="n1"))
    await http.post(PODS, pod("b", labels={"app": "y"}))
    await http.post("/api/v1/namespaces/kube-system/pods", pod("c", labels={"app": "x"}))
    _, listed = await http.get("/api/v1/pods")
    assert listed["kind"] == "PodList" and listed["metadata"]["resourceVersion"].isdigit()
    assert [p["metadata"]["name"] for p in listed["items"]] == ["a", "b", "c"]
    assert "kind" not in listed["items"][0]  # list items carry no kind, as on the wire

    async def names(query: str) -> list[str]:
        status, body = await http.get(f"/api/v1/pods?{query}")
        assert status == 200, body
        return [p["metadata"]["name"] for p in body["items"]]

    assert await names("labelSelector=app%3Dx") == ["a", "c"]
    assert await names("labelSelector=app+in+(x,y),tier") == ["a"]
    assert await names("labelSelector=!tier") == ["b", "c"]
    assert await names("labelSelector=app!%3Dx") == ["b"]
    assert await names("fieldSelector=spec.nodeName%3Dn1") == ["a"]
    assert await names("fieldSelector=spec.nodeName%3D") == ["b", "c"]
    assert await names("fieldSelector=metadata.namespace%3Dkube-system") == ["c"]
    assert await names("fieldSelector=status.phase%3DPending,metadata.name!%3Da") == ["b", "c"]


async def test_bad_selectors_are_400(http: Http) -> None:
    status, body = await http.get("/api/v1/pods?fieldSelector=spec.bogus%3D1")
    assert (status, body["message"]) == (400, "field label not supported: spec.bogus")
    status, body = await http.get("/api/v1/pods?labelSelector=a+in+b")
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_list_pagination(http: Http) -> None:
    for name in "abcde":
        await http.post(PODS, pod(name))
    _, page = await http.get(f"{PODS}?limit=2")
    seen = [p["metadata"]["name"] for p in page["items"]]
    assert page["metadata"]["remainingItemCount"] == 3
    while page["metadata"].get("continue"):
        _, page = await http.get(f"{PODS}?limit=2&continue={page['metadata']['continue']}")
        seen += [p["metadata"]["name"] for p in page["items"]]
    assert seen == list("abcde")


async def test_list_with_too_large_version_is_504(http: Http) -> None:
    status, body = await http.get(f"{PODS}?resourceVersion=999999")
    assert (status, body["reason"]) == (504, "Timeout")


async def test_unknown_path_and_method(http: Http) -> None:
    assert (await http.get("/api/v1/widgets"))[0] == 404
    status, body = await http.call("POST", f"{PODS}/a/status", {})
    assert (status, body["reason"]) == (405, "MethodNotAllowed")


async def test_in_process_store_view(apiserver: FakeKubeAPIServer, http: Http) -> None:
    apiserver.store.create("nodes", None, node("n1"))
    status, body = await http.get("/api/v1/nodes/n1")
    assert status == 200 and body["metadata"]["name"] == "n1"
    assert apiserver.requests[("get", "nodes")] == 1


async def test_binding_accepts_only_post(http: Http) -> None:
    await http.post(PODS, pod("a"))
    assert (await http.get(f"{PODS}/a/binding"))[0] == 405
    assert (await http.patch(f"{PODS}/a/binding", {}))[0] == 405
    assert (await http.get("/api/v1/namespaces/default/bindings"))[0] == 405


async def test_delete_collection_with_selector(http: Http, apiserver: FakeKubeAPIServer) -> None:
    await http.post(PODS, pod("a", labels={"app": "x"}))
    await http.post(PODS, pod("b", labels={"app": "y"}))
    status, body = await http.call("DELETE", f"{PODS}?labelSelector=app%3Dx")
    assert status == 200 and body["kind"] == "PodList"
    assert [p["metadata"]["name"] for p in body["items"]] == ["a"]
    assert [p.meta.name for p in apiserver.store.matching("pods")] == ["b"]


async def test_malformed_bodies_are_400(http: Http) -> None:
    async with http.session.post(
        PODS, data=b"{not json", headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 400
        assert (await response.json())["reason"] == "BadRequest"
    status, body = await http.post(PODS, ["a", "list"])
    assert status == 400
    status, body = await http.post(PODS, {**pod("a"), "kind": "Node"})
    assert status == 400 and "does not match" in body["message"]


async def test_dry_run_is_refused_not_persisted(http: Http, apiserver: FakeKubeAPIServer) -> None:
    status, body = await http.post(f"{PODS}?dryRun=All", pod("a"))
    assert status == 400 and "dryRun" in body["message"]
    assert apiserver.store.matching("pods") == []


async def test_pod_status_on_create_is_reset_over_http(
    http: Http, apiserver: FakeKubeAPIServer
) -> None:
    body = {**pod("a"), "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    _, created = await http.post(PODS, body)
    assert created["status"] == {"phase": "Pending"}
    seeded = apiserver.store.create("pods", "default", {**pod("b"), "status": {"phase": "Running"}})
    assert seeded.body["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("metadata", "status", "reason"),
    [
        pytest.param({"annotations": {"a": 1}}, 400, "BadRequest", id="annotation-not-string"),
        pytest.param({"labels": ["x"]}, 400, "BadRequest", id="labels-not-a-map"),
        pytest.param({"labels": {"a": "has space"}}, 422, "Invalid", id="bad-label-value"),
        pytest.param({"labels": {"-bad": "x"}}, 422, "Invalid", id="bad-label-key"),
        pytest.param(
            {"annotations": {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1,0:;"}},
            200,
            None,
            id="hami-annotation-ok",
        ),
    ],
)
async def test_label_and_annotation_checks(
    http: Http, metadata: dict, status: int, reason: str | None
) -> None:
    await http.post(PODS, pod("a"))
    code, body = await http.patch(f"{PODS}/a", {"metadata": metadata})
    assert code == status, body
    if reason:
        assert body["reason"] == reason
