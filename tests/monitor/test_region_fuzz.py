"""Whatever a region file holds, the reader answers or refuses with RegionError: no crash."""

import contextlib
import os
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyhami.monitor.region import Region, RegionError

from .regionfile import MAGIC, SPEC_V0, SPEC_V1, Mem, Proc, RegionSpec, region_bytes, uuid_of

BASE = region_bytes(
    RegionSpec(
        uuids=(uuid_of(0), uuid_of(1)),
        procs=(Proc(pid=3, used={0: Mem(1, 2, 3, 6)}, sm_util={1: 50}),),
    )
)
SIZES = st.sampled_from(
    [
        0,
        4,
        11,
        12,
        4096,
        SPEC_V0["size"] - 1,
        SPEC_V0["size"],
        SPEC_V1["size"] - 1,
        SPEC_V1["size"],
        SPEC_V1["size"] + 1,
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=SIZES,
    magic=st.sampled_from([MAGIC, 0, -1, MAGIC + 1]),
    major=st.integers(0, 3),
    num=st.integers(0, 2**64 - 1),
    proc_num=st.integers(-(2**31), 2**31 - 1),
    noise=st.lists(
        st.tuples(st.integers(0, SPEC_V1["size"] - 8), st.binary(min_size=8, max_size=8)),
        max_size=20,
    ),
)
def test_reader_never_crashes(
    size: int, magic: int, major: int, num: int, proc_num: int, noise: list[tuple[int, bytes]]
) -> None:
    data = bytearray(BASE)
    struct.pack_into("<iI", data, 0, magic, major)
    struct.pack_into("<Q", data, SPEC_V1["device_num"], num)
    struct.pack_into("<i", data, SPEC_V1["proc_num"], proc_num)
    for at, chunk in noise:
        data[at : at + 8] = chunk
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.cache"
        path.write_bytes(bytes(data[:size]))
        try:
            region = Region.open(path)
        except RegionError:
            return
        try:
            snapshot = region.snapshot()
        except RegionError:
            return
        finally:
            region.close()
    assert len(snapshot.devices) <= 16
    assert all(d.used >= 0 and d.context >= 0 and d.sm_util >= 0 for d in snapshot.devices)
    assert len(snapshot.processes) <= 1024


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    proc_num=st.integers(0, 8),
    cut=st.integers(0, SPEC_V1["size"] + 1),
    regrow=st.one_of(st.none(), st.integers(0, SPEC_V1["size"] + 64)),
    noise=st.lists(
        st.tuples(st.integers(0, SPEC_V1["size"] - 8), st.binary(min_size=1, max_size=8)),
        max_size=10,
    ),
)
def test_a_file_changed_after_open_is_read_or_refused(
    proc_num: int, cut: int, regrow: int | None, noise: list[tuple[int, bytes]]
) -> None:
    """What a container can do to its open region: cut it anywhere, grow it back (with zeros),
    scribble on it. Every read and write answers or raises RegionError, and never grows a
    shrunk file back."""
    data = bytearray(BASE)
    struct.pack_into("<i", data, SPEC_V1["proc_num"], proc_num)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.cache"
        path.write_bytes(bytes(data))
        region = Region.open(path)
        try:
            os.truncate(path, cut)
            if regrow is not None:
                os.truncate(path, regrow)
            with path.open("r+b") as file:
                for at, chunk in noise:
                    if at < os.path.getsize(path):
                        file.seek(at)
                        file.write(chunk)
            size = os.path.getsize(path)
            for action in (
                region.snapshot,
                region.feedback,
                lambda: region.write_recent_kernel(-1),
                lambda: region.write_utilization_switch(0),
            ):
                with contextlib.suppress(RegionError):
                    action()
            assert os.path.getsize(path) == size
        finally:
            region.close()
