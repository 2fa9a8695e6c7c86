"""On a machine with an NVIDIA driver: the annotation this node would publish, from real NVML."""

import json

import pytest

from pyhami.deviceplugin.config import VgpuConfig
from pyhami.deviceplugin.health import HealthBoard
from pyhami.deviceplugin.inventory import discover
from pyhami.deviceplugin.register import Scanner
from pyhami.deviceplugin.topology import read_pair_scores
from pyhami.nvml import NvmlUnavailableError, open_nvml
from pyhami.protocol import decode_node_devices, encode_node_devices, encode_pair_scores

pytestmark = pytest.mark.gpu


def test_real_nvml_annotation() -> None:
    try:
        nvml = open_nvml()
    except NvmlUnavailableError as error:
        pytest.skip(f"no NVIDIA driver here: {error}")
    try:
        config = VgpuConfig()
        gpus = discover(nvml, config.device_filter)
        assert gpus, "the driver is present but NVML lists no GPU"
        board = HealthBoard(g.uuid for g in gpus)
        devices = Scanner(nvml, gpus, config, board, topology_score=True).devices()
        value = encode_node_devices(devices)
        print("hami.io/node-nvidia-register:", value)
        print("hami.io/node-nvidia-score:", encode_pair_scores(read_pair_scores(nvml, gpus).scores))
        decoded = decode_node_devices(value)
        assert [d.id for d in decoded] == [g.uuid for g in gpus]
        for device in decoded:
            assert device.id.startswith("GPU-")
            assert device.devmem > 0 and device.count == 10 and device.devcore == 100
            assert device.type.startswith("NVIDIA")
            assert device.health
        assert json.loads(value)[0]["mode"] == "hami-core"
    finally:
        nvml.close()
