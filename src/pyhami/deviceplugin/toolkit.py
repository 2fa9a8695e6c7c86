"""NVIDIA container-toolkit features the plugin passes through Allocate.

With the `envvar` device-list strategy (the only one pyhami serves) these are environment
variables the NVIDIA container runtime acts on: `NVIDIA_GDRCOPY`, `NVIDIA_GDS` and
`NVIDIA_MOFED` set to `enabled` when their flags are on, and `NVIDIA_IMEX_CHANNELS` naming the
IMEX channels found on the node. Every GPU container gets them, in hami-core and MIG mode alike.
"""

import logging
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

IMEX_CHANNEL_DIR = PurePosixPath("/dev/nvidia-caps-imex-channels")
SUPPORTED_IMEX_CHANNELS = (0,)  # as HAMi (NVIDIA's plugin): only channel 0, or none


class ToolkitConfigError(ValueError):
    """A feature flag that cannot be served; the message names the flag."""


def is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def parse_imex_channel_ids(text: str) -> tuple[int, ...]:
    """`--imex-channel-ids` / `IMEX_CHANNEL_IDS`: comma-separated integers, only `0` allowed."""
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise ToolkitConfigError(
                f"--imex-channel-ids: {part!r} is not an integer (value {text!r})"
            ) from None
    if any(channel not in SUPPORTED_IMEX_CHANNELS for channel in ids):
        raise ToolkitConfigError(f"--imex-channel-ids: only channel 0 is supported, got {text!r}")
    return tuple(dict.fromkeys(ids))


def imex_channels(
    ids: Sequence[int],
    dev_root: Path,
    *,
    required: bool,
    present: Callable[[Path], bool] = is_char_device,
) -> tuple[int, ...]:
    """The configured channels whose device node exists, in this container's /dev or under the
    host's `dev_root`; a missing one is an error when `required`, else skipped with a warning."""
    found = []
    for channel in ids:
        node = IMEX_CHANNEL_DIR / f"channel{channel}"
        host = dev_root / str(node).lstrip("/")
        # With the default dev root `/` both are one path: look once.
        if any(present(path) for path in dict.fromkeys((Path(node), host))):
            found.append(channel)
            continue
        if required:
            raise ToolkitConfigError(
                f"--imex-required: IMEX channel {channel} has no character device at {node} "
                f"or {host}"
            )
        log.warning("IMEX channel %d not found at %s or %s; not offered", channel, node, host)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class ToolkitFeatures:
    gdrcopy: bool = False
    gds: bool = False
    mofed: bool = False
    imex_channels: tuple[int, ...] = ()

    def env(self) -> tuple[tuple[str, str], ...]:
        """The variables every GPU container gets, in HAMi's order."""
        envs = []
        if self.imex_channels:
            envs.append(("NVIDIA_IMEX_CHANNELS", ",".join(map(str, self.imex_channels))))
        for name, enabled in (("GDRCOPY", self.gdrcopy), ("GDS", self.gds), ("MOFED", self.mofed)):
            if enabled:
                envs.append((f"NVIDIA_{name}", "enabled"))
        return tuple(envs)
