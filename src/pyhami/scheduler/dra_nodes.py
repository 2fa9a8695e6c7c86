"""Mixed clusters: the extender leaves DRA nodes to kube-scheduler.

A node labelled `gpu.pyhami.io/mode=dra` runs pyhami's DRA driver instead of the device
plugin: kube-scheduler allocates its GPUs through ResourceClaims. kube-scheduler asks our
extender about every pod that requests one of its managed resources, whatever the pod's
scheduler, so the extender answers for both kinds of pod:

* a pod of our scheduler (HAMi-style: the webhook sent it to us) is decided on the
  device-plugin nodes only; each DRA node is a failed node with the reason;
* any other pod (the webhook left it to kube-scheduler: headed to DRA nodes, or asking whole
  GPUs through the DeviceClass's `nvidia.com/gpu` mapping) passes on the DRA nodes untouched
  (kube-scheduler's DRA plugin decides) and fails on the device-plugin nodes, whose devices
  our ledger accounts; `/bind` of such a pod to a DRA node is a plain Binding.

Without DRA nodes among the candidates everything is as before.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Collection
from typing import Any, Protocol

from pyhami.devices.nvidia.dra_claims import NODE_MODE_DRA, NODE_MODE_LABEL
from pyhami.kube import KubeError
from pyhami.kube.extender_wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
)
from pyhami.scheduler.explanations import Explanation, PodRef, keep_newest
from pyhami.scheduler.server import ExtenderService

DRA_NODE_REASON = (
    f"node {NODE_MODE_LABEL}={NODE_MODE_DRA}: its GPUs are allocated by kube-scheduler "
    "through ResourceClaims, not by this extender"
)
DEVICE_PLUGIN_NODE_REASON = (
    "node runs the device plugin: a pod of kube-scheduler's own profiles gets GPUs on DRA nodes"
)
PASSED_KEPT = 4096  # pods passed to DRA nodes and not bound yet, newest kept


class Binder(Protocol):
    async def bind_pod(
        self, namespace: str, name: str, node: str, *, uid: str | None = None
    ) -> Any: ...


class DraAwareExtender:
    """Wraps the extender: DRA nodes are kube-scheduler's (see the module's docstring)."""

    def __init__(
        self,
        inner: ExtenderService,
        dra_nodes: Collection[str],
        kube: Binder,
        *,
        scheduler_name: str,
    ) -> None:
        self._inner = inner
        self._dra_nodes = dra_nodes  # kept current by the scheduler's node events
        self._kube = kube
        self._scheduler_name = scheduler_name
        self._passed: OrderedDict[str, tuple[str, str]] = OrderedDict()  # uid -> namespace, name

    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        names = args.node_names
        if names is None or not self._dra_nodes:
            return await self._inner.filter(args)
        dra = [n for n in names if n in self._dra_nodes]
        if not dra:
            return await self._inner.filter(args)
        others = tuple(n for n in names if n not in self._dra_nodes)
        pod = args.pod
        if pod.scheduler_name != self._scheduler_name:
            if pod.uid:
                keep_newest(self._passed, pod.uid, (pod.namespace, pod.name), PASSED_KEPT)
            failed = dict.fromkeys(others, DEVICE_PLUGIN_NODE_REASON)
            return ExtenderFilterResult(node_names=dra, failed_nodes=failed or None)
        if others:
            result = await self._inner.filter(dataclasses.replace(args, node_names=others))
        else:
            result = ExtenderFilterResult(node_names=[])
        if result.error:
            return result
        failed = {**(result.failed_nodes or {}), **dict.fromkeys(dra, DRA_NODE_REASON)}
        return dataclasses.replace(result, node_names=result.node_names or [], failed_nodes=failed)

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        passed = self._passed.get(args.pod_uid)
        if passed is None:
            return await self._inner.bind(args)
        if passed != (args.pod_namespace, args.pod_name):
            wanted = f"{args.pod_namespace}/{args.pod_name}"
            return ExtenderBindingResult(f"pod uid {args.pod_uid} is not {wanted}")
        if args.node not in self._dra_nodes:
            return ExtenderBindingResult(f"node {args.node} is not a DRA node")
        try:
            await self._kube.bind_pod(
                args.pod_namespace, args.pod_name, args.node, uid=args.pod_uid
            )
        except KubeError as err:
            return ExtenderBindingResult(str(err))
        del self._passed[args.pod_uid]
        return ExtenderBindingResult()

    def explain(self, pod: PodRef) -> Explanation | None:
        return self._inner.explain(pod)

    def readiness(self) -> tuple[bool, str]:
        return self._inner.readiness()
