"""The prepared claims on disk, so a restarted driver answers kubelet exactly as before.

`<plugin dir>/checkpoint.json` holds a format version, the prepared claims keyed by uid, and a
SHA-256 of the claims; a file that is not JSON, has another version, misses fields or fails the
checksum is refused with `CheckpointError` naming the file and what is wrong (the driver then
refuses to start instead of answering kubelet from a state it cannot trust).
"""

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1


class CheckpointError(Exception):
    """The checkpoint file cannot be trusted; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocated device of a prepared claim, as NodePrepareResources reported it."""

    requests: tuple[str, ...]
    pool: str
    device: str
    share_id: str | None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]
    cdi_ids: tuple[str, ...]
    spec_file: str  # the claim's CDI spec
    cache_dir: str  # libvgpu's folder for the claim (region and limits file)


def _claim_from(raw: Any) -> PreparedClaim:
    if not isinstance(raw, Mapping):
        raise TypeError("a claim entry is not an object")
    devices = tuple(
        PreparedDevice(
            requests=tuple(str(r) for r in d["requests"]),
            pool=str(d["pool"]),
            device=str(d["device"]),
            share_id=None if d["share_id"] is None else str(d["share_id"]),
        )
        for d in raw["devices"]
    )
    return PreparedClaim(
        namespace=str(raw["namespace"]),
        name=str(raw["name"]),
        uid=str(raw["uid"]),
        devices=devices,
        cdi_ids=tuple(str(i) for i in raw["cdi_ids"]),
        spec_file=str(raw["spec_file"]),
        cache_dir=str(raw["cache_dir"]),
    )


def _checksum(claims: Any) -> str:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Checkpoint:
    """The prepared claims, written through to `path` on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = {}

    @classmethod
    def load(cls, path: Path) -> "Checkpoint":
        """The checkpoint at `path` (empty when there is none yet)."""
        checkpoint = cls(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return checkpoint
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint {path}: {error}") from error
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise CheckpointError(f"checkpoint {path} is not JSON: {error}") from error
        version = data.get("version") if isinstance(data, dict) else None
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {path} has format version {version!r}, this driver reads "
                f"{FORMAT_VERSION}"
            )
        raw_claims = data.get("claims")
        if _checksum(raw_claims) != data.get("checksum"):
            raise CheckpointError(
                f"checkpoint {path} fails its checksum (edited or truncated); move it away to "
                "start without prepared claims, then restart the pods using this node's GPUs"
            )
        try:
            if not isinstance(raw_claims, dict):
                raise TypeError("claims is not an object")
            checkpoint.claims = {str(uid): _claim_from(raw) for uid, raw in raw_claims.items()}
        except (KeyError, TypeError) as error:
            raise CheckpointError(f"checkpoint {path} has a malformed claim: {error}") from error
        return checkpoint

    def put(self, claim: PreparedClaim) -> None:
        self.claims[claim.uid] = claim
        self._save()

    def remove(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self._save()

    def _save(self) -> None:
        claims = {uid: asdict(claim) for uid, claim in sorted(self.claims.items())}
        # asdict keeps tuples; the checksum is over the JSON form that load() reads back.
        plain = json.loads(json.dumps(claims))
        data = {"version": FORMAT_VERSION, "checksum": _checksum(plain), "claims": plain}
        write_whole(self.path, json.dumps(data, indent=1) + "\n")


def write_whole(path: Path, text: str) -> None:
    """Write `path` (mode 0644) complete or not at all, through a renamed temporary file: whoever
    reads it at any moment (the runtime, the monitor, a restarted driver) never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text)
    os.chmod(partial, 0o644)
    os.replace(partial, path)
