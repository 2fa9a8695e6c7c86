"""`pyhami scheduler` assembled: informers → ClusterState, leader election, HTTP(S) servers.

`SchedulerProcess` is what the CLI runs and what component tests start in-process against
the API double: `await process.start()` returns once it listens (caches may still be
syncing; `/readyz` says when they are), `await process.stop()` shuts it down cleanly.

Garbage collection: the informer caches and the ledger are hundreds of thousands of long-lived
objects at 1,000 nodes, and every full collection walks them all (~0.2-0.3 s with the whole
loop stalled, several times a minute under load: that was the filter's p99). Once the caches
are synced they are frozen out of the collector (`gc.freeze`); every FREEZE_SECONDS the young
generations are collected and what survived is frozen too, and every REFREEZE_SECONDS the
frozen set is thawed and fully collected once, so cyclic garbage that got frozen is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import structlog
from aiohttp import web

from pyhami.devices.config import DeviceConfig, parse_device_config
from pyhami.devices.nvidia.dra_claims import DRIVER
from pyhami.devices.nvidia.vendor import NvidiaVendor
from pyhami.engine import EngineConfig
from pyhami.kube import (
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_QUOTAS,
    RESOURCE_SLICES,
    AlreadyExists,
    Clock,
    EventHandlers,
    InformerSettings,
    KubeClient,
    LeaseLock,
    NodeLocker,
    SystemClock,
    cancel_and_wait,
)
from pyhami.kube.annotation_lock import KubeNodeLockAPI
from pyhami.kube.dra_manifests import ClaimTemplate
from pyhami.kube.dra_views import read_slice
from pyhami.kube.informer import ViewInformer
from pyhami.kube.manifests import read_quota
from pyhami.kube.patches import pod_labels_patch
from pyhami.kube.scheduler_pods import SchedulerPods
from pyhami.kube.views import read_node, read_pod
from pyhami.model import NodeView
from pyhami.protocol import LABEL_SCHEDULER_ROLE, SchedulerRole
from pyhami.scheduler.dra_cards import DraCardMemories
from pyhami.scheduler.dra_nodes import DraAwareExtender
from pyhami.scheduler.events import EventRecorder
from pyhami.scheduler.eviction import EvictingPreemption
from pyhami.scheduler.explanations import PreemptionExplanation
from pyhami.scheduler.leader import ElectionTiming, LeaderElector
from pyhami.scheduler.metrics import SchedulerMetrics
from pyhami.scheduler.ownership import OWNED_ANNOTATIONS, registered_inventory
from pyhami.scheduler.preemption import Preemption, preempt_route
from pyhami.scheduler.server import build_app, build_metrics_app
from pyhami.scheduler.service import FilterBind
from pyhami.scheduler.settings import (
    SchedulerSettings,
    SettingsError,
    is_loopback,
    split_host_port,
)
from pyhami.scheduler.snapshot import metrics_snapshot
from pyhami.scheduler.state import ClusterState
from pyhami.scheduler.tls import ReloadingCertificate
from pyhami.scheduler.webhook import PodAdmission, WebhookConfig
from pyhami.serving import ConnectionGuard, ConnectionLimits

log = structlog.get_logger(__name__)

CERT_POLL_SECONDS = 10.0
INFORMER_RESYNC_SECONDS = 3600.0
FREEZE_SECONDS = 10.0
REFREEZE_SECONDS = 3600.0
T = TypeVar("T")


def load_device_config(path: str) -> DeviceConfig:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SettingsError(f"--device-config-file: cannot read {path}: {err}") from err
    return parse_device_config(text, source=path)


class SchedulerProcess:
    """One scheduler replica: caches, decisions, servers."""

    def __init__(
        self,
        settings: SchedulerSettings,
        client: KubeClient,
        device_config: DeviceConfig,
        *,
        metrics_route_on_main: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock: Clock = clock or SystemClock()
        config = EngineConfig(
            vendor=NvidiaVendor(device_config.nvidia),
            nvidia=device_config.nvidia,
            node_policy=settings.node_scheduler_policy,
            gpu_policy=settings.gpu_scheduler_policy,
        )
        self.state = ClusterState(
            config, registered_inventory, node_selector=settings.node_label_selector
        )
        self.synced = asyncio.Event()
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            lock = LeaseLock(
                client,
                settings.leader_elect_resource_namespace,
                settings.leader_elect_resource_name,
            )
            self.elector = LeaderElector(
                lock,
                settings.identity,
                ElectionTiming(
                    settings.lease_duration.total_seconds(),
                    settings.renew_deadline.total_seconds(),
                    settings.retry_period.total_seconds(),
                ),
                clock=self.clock,
                on_change=self._leadership_changed,
                campaign=settings.leader_elect_campaign,
            )
        self.metrics = SchedulerMetrics(
            lambda: metrics_snapshot(self.state), legacy=settings.legacy_metrics
        )
        self.events = EventRecorder(client.create_event, settings.scheduler_name, self.clock)
        self.service = FilterBind(
            self.state,
            SchedulerPods(client),
            NodeLocker(
                KubeNodeLockAPI(client), timeout=settings.node_lock_timeout, clock=self.clock
            ),
            self.events,
            self.metrics,
            clock=self.clock,
            owned_annotations=OWNED_ANNOTATIONS,
            leadership=self.elector,
            synced=self.synced,
            sync_wait=settings.sync_wait,
            lock_retry_timeout=settings.node_lock_retry_timeout,
            explain_all=settings.explain_all,
        )
        self.evicting = EvictingPreemption(
            self.state, client, self.events, self.metrics, clock=self.clock
        )
        self.preemption = Preemption(self.service, nominated=self.evicting.nominated)
        self.service.on_unschedulable = self.evicting.on_unschedulable
        self.dra_cards = DraCardMemories()
        self.admission = PodAdmission(
            WebhookConfig(
                scheduler_name=settings.scheduler_name,
                force_overwrite_default_scheduler=settings.force_overwrite_default_scheduler,
                trusted_writers=settings.trusted_writers,
                owned_annotations=OWNED_ANNOTATIONS,
                limit_control_namespaces=frozenset(settings.limit_control_namespaces),
                dra_mode=settings.dra_mode,
            ),
            device_config.nvidia,
            self.state.exceeds_quota,
            ensure_object=self._ensure_claim_template,
            dra_card_memories=self.dra_cards.sizes,
        )
        informer = partial(
            ViewInformer, client, settings=InformerSettings(resync_period_s=INFORMER_RESYNC_SECONDS)
        )
        selector = ",".join(f"{k}={v}" for k, v in settings.node_label_selector.items())
        state = self.state
        # The informers keep the views the state decides on: one copy of every object.
        self.informers: dict[str, ViewInformer[Any]] = {
            "pods": _watched(
                informer(PODS, read_pod, name="scheduler/pods"), state.on_pod, state.on_pod_deleted
            ),
            "nodes": _watched(
                informer(NODES, read_node, label_selector=selector, name="scheduler/nodes"),
                state.on_node,
                self._node_gone,
            ),
            "quotas": _watched(
                informer(RESOURCE_QUOTAS, read_quota, name="scheduler/resourcequotas"),
                state.on_quota,
                state.on_quota_deleted,
            ),
        }
        if settings.dra_mode != "off":
            # the DRA GPUs' memory sizes, for the webhook's gpumem-percentage alternatives
            self.informers["resourceslices"] = _watched(
                informer(
                    RESOURCE_SLICES,
                    read_slice,
                    field_selector=f"spec.driver={DRIVER}",
                    name="scheduler/resourceslices",
                ),
                self.dra_cards.on_slice,
                self.dra_cards.on_slice_deleted,
            )
        self._metrics_route_on_main = metrics_route_on_main
        self.certificate: ReloadingCertificate | None = None
        if settings.tls:
            client_ca = settings.extender_client_ca
            self.certificate = ReloadingCertificate(
                Path(settings.cert_file),
                Path(settings.key_file),
                Path(client_ca) if client_ca else None,
            )
        self.limits = ConnectionLimits(
            header_timeout_s=settings.http_header_timeout.total_seconds(),
            body_timeout_s=settings.http_body_timeout.total_seconds(),
            max_connections=settings.http_max_connections,
        )
        self.guards: dict[str, ConnectionGuard] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self.main_port = 0
        self.metrics_port = 0

    # ----- wiring ----------------------------------------------------------------------------

    async def _ensure_claim_template(self, template: ClaimTemplate) -> None:
        """The webhook's ResourceClaimTemplate (named by its content: one there already is it)."""
        with contextlib.suppress(AlreadyExists):
            await self.client.create(
                RESOURCE_CLAIM_TEMPLATES, template.manifest(), template.namespace
            )

    def _node_gone(self, node: NodeView) -> None:
        self.state.on_node_deleted(node)
        self.service.bind_turns.forget(node.name)

    def _preemption_of(self, pod: str) -> PreemptionExplanation | None:
        return self.evicting.explanation(pod) or self.preemption.explanation(pod)

    async def _leadership_changed(self, leading: bool) -> None:
        """Label our own pod for the chart's Service selector (as HAMi's leader does, self only)."""
        pod, namespace = self.settings.identity, self.settings.pod_namespace
        if not pod or not namespace:
            return
        role = SchedulerRole.LEADER if leading else SchedulerRole.FOLLOWER
        try:
            await self.client.patch_pod(
                namespace, pod, pod_labels_patch({LABEL_SCHEDULER_ROLE: role})
            )
        except Exception as err:
            log.warning("role label not written", pod=pod, role=role, error=str(err))

    # ----- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        for informer in self.informers.values():
            informer.start()
        self._spawn(self._wait_synced(), "sync")
        if self.elector is not None:
            self._spawn(self.elector.run(self._stop), "leader")
        if self.certificate is not None:
            self._spawn(self.certificate.watch(CERT_POLL_SECONDS, self._stop), "tls")
        authenticated = bool(self.settings.extender_client_ca)
        main = build_app(
            DraAwareExtender(
                self.service,
                self.state.dra_nodes,
                self.client,
                scheduler_name=self.settings.scheduler_name,
            ),
            self.admission,
            self.metrics,
            metrics_route=self._metrics_route_on_main,
            require_client_certificate=authenticated,
            body_timeout_s=self.limits.body_timeout_s,
            preempt=preempt_route(self.preemption, self.limits.body_timeout_s),
            preemption_of=self._preemption_of,
        )
        host, port = split_host_port(self.settings.http_bind, "--http_bind")
        ssl = self.certificate.context if self.certificate is not None else None
        self.main_port = await self._serve("main", main, host, port, ssl)
        if not self._metrics_route_on_main:
            mhost, mport = split_host_port(
                self.settings.metrics_bind_address, "--metrics-bind-address"
            )
            self.metrics_port = await self._serve(
                "metrics", build_metrics_app(self.metrics), mhost, mport, None
            )
        if not authenticated and not is_loopback(host):
            log.warning(
                "extender callers are not authenticated: whoever reaches the port may call "
                "/filter and /bind (set --extender-client-ca)",
                http_bind=self.settings.http_bind,
            )
        log.info(
            "scheduler listening",
            port=self.main_port,
            tls=ssl is not None,
            client_certificates=authenticated,
            metrics_port=self.metrics_port,
        )

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        # These end when `stop` is asked for, so they are awaited there rather than guarded.
        self._tasks.append(asyncio.create_task(work, name=f"scheduler/{name}"))

    async def _serve(self, name: str, app: web.Application, host: str, port: int, ssl: Any) -> int:
        self.guards[name] = guard = ConnectionGuard(self.limits)
        return await guard.serve(app, host, port, ssl)

    async def _wait_synced(self) -> None:
        # the engine's caches; the DRA card sizes (for the webhook) do not hold the extender back
        engine = (self.informers[name] for name in ("pods", "nodes", "quotas"))
        await asyncio.gather(*(i.synced.wait() for i in engine))
        freeze_heap(full=True)
        self.synced.set()
        log.info("scheduler caches synced", nodes=len(self.state.ledger.node_names()))
        self._spawn(self._keep_frozen(), "gc")

    async def _keep_frozen(self) -> None:
        since_full = 0.0
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), FREEZE_SECONDS)
            except TimeoutError:
                since_full += FREEZE_SECONDS
                full = since_full >= REFREEZE_SECONDS
                since_full = 0.0 if full else since_full
                freeze_heap(full=full)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait(self._tasks, timeout=5)  # the leader gives its lease up
        await cancel_and_wait(*self._tasks)
        for guard in self.guards.values():
            await guard.close()
        for informer in self.informers.values():
            await informer.stop()
        await self.evicting.close()
        await self.events.drain()
        gc.unfreeze()  # what this replica froze is garbage now (tests start many in one process)

    def request_stop(self) -> None:
        """Ask `run_forever` to shut down cleanly (SIGTERM): the lease is given back."""
        self._stop.set()

    async def run_forever(self) -> None:
        await self.start()
        try:
            await self._stop.wait()
        finally:
            await self.stop()


def _watched(
    informer: ViewInformer[T], seen: Callable[[T], None], gone: Callable[[T], None]
) -> ViewInformer[T]:
    """The informer, telling `seen` of each object added or updated and `gone` of each deleted."""
    informer.add_handlers(
        EventHandlers(on_add=seen, on_update=lambda _old, new: seen(new), on_delete=gone)
    )
    return informer


def freeze_heap(*, full: bool) -> None:
    """Move the surviving heap out of the collector's reach (see the module docstring)."""
    if full:
        gc.unfreeze()
        gc.collect()
    else:
        gc.collect(1)
    gc.freeze()
