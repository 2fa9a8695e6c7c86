"""The pure scheduling engine: where a GPU pod goes, which cards it gets, and why not elsewhere.

No I/O, no clock, no globals: everything a decision depends on is passed in, so the live
`/filter`, `pyhami simulate`, explanations and benchmarks run the very same code. The device
backend too: the engine reads requests, card filters and Fit through `EngineConfig.vendor`
(`devices/vendor.py`) and never imports one.

How a service uses it::

    from pyhami import engine
    from pyhami.devices.nvidia.inventory import InventoryError, node_inventory
    from pyhami.devices.nvidia.vendor import NvidiaVendor

    vendor = NvidiaVendor(config.nvidia)          # the device backend, built once at start
    engine_config = engine.EngineConfig(vendor=vendor, nvidia=config.nvidia)
    ledger = engine.Ledger(vendor.name)           # per-card usage, updated incrementally
    quotas = engine.QuotaBook(config.nvidia)      # ResourceQuota limits per namespace

    # node informer / registry: registration, pair scores, cordon list (InventoryError: skip)
    ledger.upsert_node(name, node_inventory(node_annotations))
    ledger.remove_node(name)

    # pod informer: `allocation_of` reads hami.io/vgpu-node + the allocated annotation of the
    # pod's view (`pyhami.kube.views.read_pod`; PodSpecError on a malformed one: log and skip,
    # as HAMi does)
    allocation = engine.allocation_of(pod)        # None: not scheduled by us, or finished
    if allocation is None:
        ledger.remove_pod(pod.key)
    else:
        ledger.add_pod(allocation)                # replaces an earlier entry for the same key

    # quota informer
    quotas.set_quota(uid, namespace, quota["spec"]["hard"]); quotas.remove_quota(uid)

    # POST /filter with NodeNames
    ledger.remove_pod(key)                        # as HAMi: drop the pod's old reservation
    plan = engine.plan_pod(pod, engine_config)    # PodSpecError: answer Error with its text
    decision = engine.decide(plan, node_names, ledger, config=engine_config, quotas=quotas)
    if (chosen := decision.allocation) is not None:   # Outcome.SCHEDULED
        ledger.add_pod(chosen)                    # reserve ...
        try:                                      # exactly what HAMi writes:
            await patch_pod(pod, protocol.filter_annotations(chosen.node, chosen.containers,
                            chosen.mig_allocations, engine_config.vendor.keys, now))
        except ApiError:
            ledger.remove_pod(decision.key)       # ... and undo (idempotent)
            raise
    # answer: NodeNames=[decision.node] or FailedNodes=decision.failed_nodes;
    # Outcome.NO_DEVICE_REQUEST: pass every node through; Outcome.ERROR: Error=decision.error

Costs. `decide` visits candidates best-first from the ledger's sorted node scores and stops at
the first node that fits; when the first nodes do not fit, an order-free request is screened
against every card at once (`columns.py`), so "nothing fits" stays cheap too.
`all_reasons=True` also gives every other candidate its verdict through those cheap paths
(for events "even when a node fits": ~20 ms at 5,000 nodes × 8 GPUs). `explain=True`
evaluates every candidate in Python with a per-card trace (for `/explain`, `pyhami explain`):
some 30x dearer, so keep it off the `/filter` hot path. A long-running service should
`gc.collect(); gc.freeze()` once its caches are synced, so full collections do not walk the
whole cluster state during a decision (benchmarks/filter_scale.py does).

Decisions are deterministic: equal node scores go to the smaller node name (HAMi leaves it
to goroutine timing).
"""

from pyhami.engine.collapse import app_only_usage, collapse_init_usage, container_phases
from pyhami.engine.decide import Decision, Outcome, decide
from pyhami.engine.evaluate import NodeFailure, NodeVerdict
from pyhami.engine.ledger import Ledger, LedgerCard, PodAllocation, PodKey, build_ledger
from pyhami.engine.pod import EngineConfig, PodPlan, allocation_of, plan_pod
from pyhami.engine.quota import QuotaBook
from pyhami.model import PodSpecError
from pyhami.protocol import GpuPolicy, NodePolicy

__all__ = [
    "Decision",
    "EngineConfig",
    "GpuPolicy",
    "Ledger",
    "LedgerCard",
    "NodeFailure",
    "NodePolicy",
    "NodeVerdict",
    "Outcome",
    "PodAllocation",
    "PodKey",
    "PodPlan",
    "PodSpecError",
    "QuotaBook",
    "allocation_of",
    "app_only_usage",
    "build_ledger",
    "collapse_init_usage",
    "container_phases",
    "decide",
    "plan_pod",
]
