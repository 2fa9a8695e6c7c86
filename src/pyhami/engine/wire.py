"""Every annotation string the engine reads or writes, in one place, via `pyhami.protocol`.

Placeholders until pyhami.protocol exports its codecs; then each becomes a one-line call.
"""

import json
from collections.abc import Mapping, Sequence

from pyhami.devices.reasons import Reason
from pyhami.engine.policy import ScoringWeights
from pyhami.model import ContainerDevice, MigAllocation, MigPlacement, PodSingleDevice


class WireError(ValueError):
    """An annotation value that does not decode; the message names the key and the value."""


def reason_text(reasons: Mapping[Reason, int], total: int) -> str:
    """HAMi `GenReason`: `"<n>/<cards> <Reason>"` entries, sorted as strings, joined by ", "."""
    return ", ".join(sorted(f"{count}/{total} {reason}" for reason, count in reasons.items()))


def encode_devices(devices: PodSingleDevice) -> str:
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in container) + ";"
        for container in devices
    )


def decode_devices(value: str) -> PodSingleDevice:
    containers = []
    for part in value.split(";"):
        devices = []
        for entry in part.split(":"):
            if "," not in entry:
                continue
            fields = entry.split(",")
            if len(fields) < 4:
                raise WireError(f"pod devices {value!r}: missing fields")
            try:
                mem, cores = int(fields[2]), int(fields[3])
                devices.append(ContainerDevice(fields[0], fields[1], mem, cores))
            except ValueError as err:
                raise WireError(f"pod devices {value!r}: {err}") from err
        containers.append(tuple(devices))
    return tuple(containers)


def encode_migs(allocations: Sequence[MigAllocation]) -> str:
    return json.dumps(
        [
            {
                "containerIndex": a.container_index,
                "deviceIndex": a.device_index,
                "gpuUUID": a.gpu_uuid,
                "profile": a.profile,
                "placement": {"start": a.placement.start, "size": a.placement.size},
            }
            for a in allocations
        ],
        separators=(",", ":"),
    )


def decode_migs(value: str) -> tuple[MigAllocation, ...]:
    if not value:
        return ()
    try:
        items = json.loads(value)
        return tuple(
            MigAllocation(
                item["containerIndex"],
                item["deviceIndex"],
                item["gpuUUID"],
                item["profile"],
                MigPlacement(item["placement"]["start"], item["placement"]["size"]),
            )
            for item in items
        )
    except (ValueError, KeyError, TypeError) as err:
        raise WireError(f"MIG allocations {value!r}: {err}") from err


def scoring_weights(value: str | None) -> ScoringWeights:
    if value is None:
        return ScoringWeights()
    try:
        parts = dict(item.split("=", 1) for item in value.split(","))
        return ScoringWeights(int(parts["slot"]), int(parts["core"]), int(parts["memory"]))
    except (ValueError, KeyError) as err:
        raise WireError(f"invalid hami.io/device-scoring-weights annotation {value!r}") from err
