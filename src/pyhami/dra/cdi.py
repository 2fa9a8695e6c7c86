"""CDI spec files: how the container runtime learns a prepared claim's env and mounts.

One spec file per claim, `<cdi dir>/gpu.pyhami.io-<claim uid>.json`, kind `gpu.pyhami.io/gpu`,
holding one device named by the claim uid; kubelet passes its fully qualified id
(`gpu.pyhami.io/gpu=<claim uid>`) to the runtime, which applies the device's containerEdits.
"""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyhami.deviceplugin.allocation import Mount
from pyhami.dra.api import DRIVER
from pyhami.dra.checkpoint import write_whole

CDI_DIR = Path("/var/run/cdi")
CDI_VERSION = "0.6.0"  # env and bind mounts need no newer spec; runtimes since 2023 read it
CDI_KIND = f"{DRIVER}/gpu"


def device_id(claim_uid: str) -> str:
    """The fully qualified CDI device id of a claim."""
    return f"{CDI_KIND}={claim_uid}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{DRIVER}-{claim_uid}.json"


def write_spec(
    path: Path, claim_uid: str, envs: Mapping[str, str], mounts: Sequence[Mount]
) -> None:
    """Write a claim's CDI spec whole; the CDI JSON exists only here, from typed env and mounts."""
    edits = {
        "env": [f"{key}={value}" for key, value in envs.items()],
        "mounts": [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"],
            }
            for m in mounts
        ],
    }
    content = {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [{"name": claim_uid, "containerEdits": edits}],
    }
    write_whole(path, json.dumps(content, indent=2) + "\n")
