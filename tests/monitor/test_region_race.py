"""A container shrinks and regrows its own region file while the monitor reads and writes it.

The reader runs in a child process, so that a fault (SIGBUS from touching a truncated mapping)
shows as that child's exit status instead of killing pytest."""

import os
import subprocess
import sys
import threading
from pathlib import Path

from .regionfile import Mem, Proc, RegionSpec, region_bytes, uuid_of

ROUNDS = 1500

READER = """
import sys
from pathlib import Path

from pyhami.monitor.region import Region, RegionError
from pyhami.monitor.scan import RegionDirectory

path, rounds = Path(sys.argv[1]), int(sys.argv[2])
scan = RegionDirectory(path.parent.parent, grace_seconds=1e9)
pod = {path.parent.name.partition("_")[0]}
region = None
while region is None:  # opened while whole, then shrunk under it
    try:
        region = Region.open(path)
    except RegionError:
        pass
read = refused = 0
for _ in range(rounds):
    scan.update(pod, now=0)  # opens (and drops) the file while it changes size
    for action in (region.snapshot, region.feedback, lambda: region.write_recent_kernel(1)):
        try:
            action()
            read += 1
        except RegionError:
            refused += 1
print(read, refused)
"""


def test_a_region_shrinking_in_a_loop_never_kills_the_reader(tmp_path: Path) -> None:
    directory = tmp_path / "0b3c6e1a-pod_main"
    directory.mkdir()
    path = directory / "a.cache"
    whole = region_bytes(
        RegionSpec(
            uuids=(uuid_of(0),),
            procs=tuple(Proc(pid=n + 1, used={0: Mem(total=n)}) for n in range(64)),
        )
    )
    path.write_bytes(whole)
    stop = threading.Event()

    def shrink_and_regrow() -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            while not stop.is_set():
                os.ftruncate(fd, 4096)
                os.pwrite(fd, whole, 0)
        finally:
            os.close(fd)

    attacker = threading.Thread(target=shrink_and_regrow)
    attacker.start()
    try:
        reader = subprocess.run(
            [sys.executable, "-c", READER, str(path), str(ROUNDS)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        stop.set()
        attacker.join()
    assert reader.returncode == 0, f"the reader died ({reader.returncode}): {reader.stderr[-2000:]}"
    read, refused = map(int, reader.stdout.splitlines()[-1].split())  # after the scan's logs
    assert read + refused == 3 * ROUNDS
    assert refused > 0, "the file never shrank under a read: the test did not test anything"
