"""Codec cost vs the bare parsing/printing underneath it, measured in the same run.

For the register JSON of an 8-GPU node (the scheduler reads one per node every 15 s) and the
pod-devices value of a 4-container pod (read per pod on every cache rebuild), each codec is
timed against a baseline that does only the syntax work: `json.loads` / `json.dumps` of the
same data, and `str.split` plus `int()` for the `;`/`:`/`,` grammar. The ratio is what Go's
rules (case-folded keys, integer literals and ranges, Go escaping, ParseInt) cost on top.
Run: `python3 benchmarks/protocol_codecs.py [--repeat 2000]`.
"""

import argparse
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pyhami.model import ContainerDevice, DeviceInfo
from pyhami.protocol import decode_node_devices, decode_pod_single_device, encode_node_devices

DEVICES = [
    DeviceInfo(
        id=f"GPU-{i:08d}-5c87-89ac-b1a6-7b53aa24b0ec",
        index=i,
        count=10,
        devmem=81920,
        devcore=100,
        type="NVIDIA-A100-SXM4-80GB",
        numa=i // 4,
        mode="hami-core",
        health=True,
    )
    for i in range(8)
]
REGISTER = encode_node_devices(DEVICES)
REGISTER_DICTS = json.loads(REGISTER)
POD_VALUE = (
    ";".join(
        f"GPU-{i:08d}-5c87-89ac-b1a6-7b53aa24b0ec,NVIDIA,{1000 * i},{10 * i}:" for i in range(4)
    )
    + ";"
)


def split_baseline(value: str) -> object:
    return [
        [
            ContainerDevice(f[0], f[1], int(f[2]), int(f[3]))
            for f in (part.split(",") for part in container.split(":") if "," in part)
        ]
        for container in value.split(";")
    ]


def best(function: Callable[[], object], repeat: int) -> float:
    return min(timeit.repeat(function, number=repeat, repeat=5)) / repeat


def main(repeat: int) -> None:
    cases = [
        (
            "register decode (8 GPUs)",
            lambda: decode_node_devices(REGISTER),
            lambda: json.loads(REGISTER),
        ),
        (
            "register encode (8 GPUs)",
            lambda: encode_node_devices(DEVICES),
            lambda: json.dumps(REGISTER_DICTS, separators=(",", ":")),
        ),
        (
            "pod devices decode (4 containers)",
            lambda: decode_pod_single_device(POD_VALUE),
            lambda: split_baseline(POD_VALUE),
        ),
    ]
    print(f"{'case':36} {'pyhami µs':>10} {'baseline µs':>12} {'ratio':>7}")
    for name, ours, baseline in cases:
        ours_s, base_s = best(ours, repeat), best(baseline, repeat)
        print(f"{name:36} {ours_s * 1e6:10.1f} {base_s * 1e6:12.1f} {ours_s / base_s:7.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    main(parser.parse_args().repeat)
