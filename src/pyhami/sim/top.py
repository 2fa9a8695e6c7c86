"""`pyhami top nodes|pods|cards`: allocated against used GPU memory and cores, like `kubectl top`.

What is allocated comes from the scheduler's `/metrics` (its ledger: `hami_gpu_*` per card,
`hami_vgpu_*_allocated_*` per pod and card); what is used comes from each node's monitor
(`hami_host_gpu_*` per card, `hami_vgpu_memory_used_bytes` and
`hami_container_device_utilization_ratio` per container and card). Memory is shown in MiB, cores
and utilisation in percent of a card.
"""

import asyncio
import ssl
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

MIB = 1 << 20

Labels = Mapping[str, str]
Sample = tuple[str, Labels, float]


class TopError(RuntimeError):
    """A metrics endpoint that cannot be read; the message names it."""


class View(StrEnum):
    NODES = "nodes"
    PODS = "pods"
    CARDS = "cards"


@dataclass(frozen=True, slots=True)
class CardRow:
    node: str
    index: str
    uuid: str
    type: str
    memory_total_mib: int
    memory_allocated_mib: int
    memory_used_mib: int | None  # None: no monitor reported this card
    cores_allocated: int
    cores_used: int | None
    tasks: int


@dataclass(frozen=True, slots=True)
class PodRow:
    namespace: str
    pod: str
    node: str
    card: str  # NODE#INDEX
    uuid: str
    memory_allocated_mib: int
    memory_used_mib: int | None
    cores_allocated: int
    cores_used: int | None


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    cards: int
    memory_total_mib: int
    memory_allocated_mib: int
    memory_used_mib: int | None
    cores_allocated: int  # summed over the node's cards: 100 per whole card
    cores_used: int | None


def parse_metrics(text: str, source: str) -> list[Sample]:
    try:
        return [
            (sample.name, sample.labels, float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except ValueError as err:
        raise TopError(f"{source}: not Prometheus text: {err}") from err


async def scrape(urls: Sequence[str], context: ssl.SSLContext | None = None) -> list[Sample]:
    """Every sample of every URL, read concurrently."""
    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(ssl=context) if context is not None else None
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:

        async def one(url: str) -> list[Sample]:
            try:
                async with http.get(url) as response:
                    if response.status != 200:
                        raise TopError(f"{url}: HTTP {response.status}")
                    return parse_metrics(await response.text(), url)
            except (aiohttp.ClientError, TimeoutError) as err:
                raise TopError(f"{url}: cannot read: {err or type(err).__name__}") from err

        pages = await asyncio.gather(*(one(url) for url in urls))
    return [sample for page in pages for sample in page]


def _by(samples: Iterable[Sample], name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Values of metric `name` summed by the given labels."""
    values: dict[tuple[str, ...], float] = defaultdict(float)
    for sample_name, labels, value in samples:
        if sample_name == name:
            values[tuple(labels.get(k, "") for k in keys)] += value
    return values


def _mib(value: float | None) -> int | None:
    return None if value is None else round(value / MIB)


def card_rows(samples: Sequence[Sample]) -> list[CardRow]:
    """One row per card the scheduler knows, with the monitors' usage where reported."""
    limits = {
        labels["device_uuid"]: (labels, value)
        for name, labels, value in samples
        if name == "hami_gpu_memory_limit_bytes" and "device_uuid" in labels
    }
    allocated = _by(samples, "hami_gpu_memory_allocated_bytes", "device_uuid")
    cores = _by(samples, "hami_gpu_core_allocated_ratio", "device_uuid")
    tasks = _by(samples, "hami_gpu_shared_count", "device_uuid")
    used = _by(samples, "hami_host_gpu_memory_used_bytes", "device_uuid")
    utilisation = _by(samples, "hami_host_gpu_utilization_ratio", "device_uuid")
    rows = []
    for uuid, (labels, total) in limits.items():
        key = (uuid,)
        rows.append(
            CardRow(
                node=labels.get("node", ""),
                index=labels.get("device_index", ""),
                uuid=uuid,
                type=labels.get("device_type", ""),
                memory_total_mib=_mib(total) or 0,
                memory_allocated_mib=_mib(allocated.get(key, 0.0)) or 0,
                memory_used_mib=_mib(used.get(key)),
                cores_allocated=round(cores.get(key, 0.0)),
                cores_used=None if key not in utilisation else round(utilisation[key]),
                tasks=round(tasks.get(key, 0.0)),
            )
        )
    return sorted(rows, key=lambda r: (r.node, int(r.index) if r.index.isdigit() else 0))


def pod_rows(samples: Sequence[Sample], namespace: str | None = None) -> list[PodRow]:
    """One row per pod and card it was given, summed over its containers."""
    keys = ("namespace", "pod", "device_uuid")
    allocated = _by(samples, "hami_vgpu_memory_allocated_bytes", *keys, "node")
    cores = _by(samples, "hami_vgpu_core_allocated_ratio", *keys)
    used = _by(samples, "hami_vgpu_memory_used_bytes", *keys)
    utilisation = _by(samples, "hami_container_device_utilization_ratio", *keys)
    cards = {row.uuid: f"{row.node}#{row.index}" for row in card_rows(samples)}
    rows = []
    for (ns, pod, uuid, node), memory in allocated.items():
        if namespace is not None and ns != namespace:
            continue
        key = (ns, pod, uuid)
        rows.append(
            PodRow(
                namespace=ns,
                pod=pod,
                node=node,
                card=cards.get(uuid, "?"),
                uuid=uuid,
                memory_allocated_mib=_mib(memory) or 0,
                memory_used_mib=_mib(used.get(key)),
                cores_allocated=round(cores.get(key, 0.0)),
                cores_used=None if key not in utilisation else round(utilisation[key]),
            )
        )
    return sorted(rows, key=lambda r: (r.namespace, r.pod, r.card))


def node_rows(cards: Sequence[CardRow]) -> list[NodeRow]:
    by_node: dict[str, list[CardRow]] = defaultdict(list)
    for card in cards:
        by_node[card.node].append(card)

    def total(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    return [
        NodeRow(
            node=node,
            cards=len(rows),
            memory_total_mib=sum(r.memory_total_mib for r in rows),
            memory_allocated_mib=sum(r.memory_allocated_mib for r in rows),
            memory_used_mib=total([r.memory_used_mib for r in rows]),
            cores_allocated=sum(r.cores_allocated for r in rows),
            cores_used=total([r.cores_used for r in rows]),
        )
        for node, rows in sorted(by_node.items())
    ]


def rows_for(view: View, samples: Sequence[Sample], namespace: str | None) -> list[Any]:
    if view is View.PODS:
        return pod_rows(samples, namespace)
    cards = card_rows(samples)
    return cards if view is View.CARDS else node_rows(cards)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


# Each column's header, by the row field it shows.
_HEADERS = {
    "node": "NODE",
    "namespace": "NAMESPACE",
    "pod": "POD",
    "cards": "CARDS",
    "index": "CARD",
    "card": "CARD",
    "memory_allocated_mib": "MEM-ALLOC(MiB)",
    "memory_used_mib": "MEM-USED(MiB)",
    "memory_total_mib": "MEM-TOTAL(MiB)",
    "cores_allocated": "CORES-ALLOC%",
    "cores_used": "CORES-USED%",
    "tasks": "TASKS",
    "type": "TYPE",
    "uuid": "UUID",
}
_MEMORY = ("memory_allocated_mib", "memory_used_mib", "memory_total_mib")
_CORES = ("cores_allocated", "cores_used")
# Columns per view; the wide ones come after.
_COLUMNS: Mapping[View, tuple[tuple[str, ...], tuple[str, ...]]] = {
    View.NODES: (("node", "cards", *_MEMORY, *_CORES), ()),
    View.CARDS: (("node", "index", *_MEMORY, *_CORES, "tasks"), ("type", "uuid")),
    View.PODS: (("namespace", "pod", "card", *_MEMORY[:2], *_CORES), ("uuid",)),
}


def as_table(view: View, rows: Sequence[Any], *, wide: bool = False) -> str:
    narrow, extra = _COLUMNS[view]
    columns = (*narrow, *extra) if wide else narrow
    heads = [_HEADERS[name] for name in columns]
    cells = [[_cell(getattr(row, name)) for name in columns] for row in rows]
    widths = [max(len(head), *(len(r[i]) for r in cells)) for i, head in enumerate(heads)]
    lines = ["   ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"
