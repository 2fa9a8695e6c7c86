"""The API server double writes resource quantities back as Kubernetes' own kube-apiserver does:
the same objects, made on both with quantities in many forms, read back equal (pod requests and
limits with the requests defaulted from limits, node capacity, quota hard), and what one refuses
the other refuses with the same words."""

import random
from typing import Any

from pyhami.controlplane import BuiltBinaries
from pyhami.kube import KubeClient, KubeError
from pyhami.testing import FakeKubeAPIServer
from pyhami.testing.fake_apiserver.quantities import canonical_quantity
from pyhami.testing.real_cluster import RealControlPlane

JsonObject = dict[str, Any]
SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
EDGES = [
    "4000",
    "1024Mi",
    "0.5",
    "01",
    "+1",
    "1.500",
    "1E3",
    "10e2",
    "1000E",
    "1.G",
    ".5",
    "e3",
    "123456789n",
    "0.000000001Ki",
    "9223372036854775807Ki",
    "12345678901234567890",
    " 7 ",
]
NOT_QUANTITIES = ["abc", "1x", "1Kb", "1e3e", "1e", "--1", "1K", "4 GB"]


def written_forms(count: int, seed: int = 14) -> list[str]:
    """Non-negative quantities of every shape the grammar allows (quota refuses negatives)."""
    rng = random.Random(seed)
    forms = list(EDGES)
    while len(forms) < count:
        whole = "0" * rng.choice([0, 0, 0, 1, 2]) + str(rng.choice([0, 1, 7, 8, 1000, 1536]))
        if rng.random() < 0.3:
            whole = str(rng.randrange(10 ** rng.randrange(1, 21)))
        fraction = "." + "".join(rng.choices("0123456789", k=rng.randrange(0, 7)))
        suffix = rng.choice([*SUFFIXES, f"e{rng.randrange(-12, 22)}", f"E+{rng.randrange(0, 9)}"])
        forms.append(
            f"{rng.choice(['', '', '+'])}{whole}{fraction if rng.random() < 0.4 else ''}{suffix}"
        )
    return forms


def objects(forms: list[str]) -> list[tuple[str, JsonObject]]:
    hard = {f"requests.example.com/q{i}": form for i, form in enumerate(forms)}
    quota = {"metadata": {"name": "forms"}, "spec": {"hard": hard}}
    containers = [
        {
            "name": f"c{i}",
            "image": "cuda-sample",
            "resources": {
                "limits": {
                    "cpu": cpu,
                    "memory": memory,
                    "nvidia.com/gpumem": gpumem,
                    "nvidia.com/gpu": "1",
                },
                "requests": {"cpu": "0.1"},
            },
        }
        for i, (cpu, memory, gpumem) in enumerate(
            [("4000", "1024Mi", "4000"), ("0.5", "1.5Gi", "1Ki"), ("1.500", "1e9", "2e3")]
        )
    ]
    pod = {"metadata": {"name": "forms"}, "spec": {"containers": containers}}
    capacity = {
        "cpu": "4000m",
        "memory": "16384Mi",
        "nvidia.com/gpu": "8",
        "pods": "110",
        "example.com/x": "4000",
    }
    node = {
        "metadata": {"name": "forms"},
        "status": {"capacity": capacity, "allocatable": capacity},
    }
    return [
        ("/api/v1/namespaces/default/resourcequotas", quota),
        ("/api/v1/namespaces/default/pods", pod),
        ("/api/v1/nodes", node),
    ]


async def read_back(client: KubeClient, forms: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for path, body in objects(forms):
        stored = await client.request("POST", path, body=body)
        if stored["kind"] == "ResourceQuota":
            seen["quota"] = stored["spec"]["hard"]
        elif stored["kind"] == "Pod":
            seen["pod"] = [c["resources"] for c in stored["spec"]["containers"]]
        else:
            seen["node"] = {key: stored["status"][key] for key in ("capacity", "allocatable")}
    refusals = []
    for text in NOT_QUANTITIES:
        quota = {"metadata": {"name": "bad"}, "spec": {"hard": {"requests.example.com/x": text}}}
        try:
            await client.request("POST", "/api/v1/namespaces/default/resourcequotas", body=quota)
            refusals.append((text, 0, ""))
        except KubeError as err:
            refusals.append((text, err.code, str(err.status.get("message"))))
    seen["refusals"] = refusals
    return seen


async def test_quantities_read_back_the_same_from_the_double_and_kube_apiserver(
    kubernetes: BuiltBinaries,
) -> None:
    forms = written_forms(300)
    async with RealControlPlane(kubernetes) as plane:
        real = await read_back(await plane.client(plane.admin_kubeconfig), forms)
    async with FakeKubeAPIServer() as api:
        client = KubeClient(api.configuration())
        try:
            double = await read_back(client, forms)
        finally:
            await client.close()
    assert real["quota"] == {
        f"requests.example.com/q{i}": canonical_quantity(form) for i, form in enumerate(forms)
    }
    assert real["pod"][0]["limits"]["nvidia.com/gpumem"] == "4k"
    assert real["pod"][0]["requests"]["nvidia.com/gpumem"] == "4k"  # defaulted from the limit
    assert {code for _, code, _ in real["refusals"]} == {400}
    for part in ("quota", "pod", "node", "refusals"):
        assert double[part] == real[part], part
