"""Config layering: defaults < flags < device-config YAML < per-node JSON (with our fixes)."""

import json
from pathlib import Path

import pytest

from pyhami.deviceplugin.config import (
    ConfigError,
    DeviceFilter,
    VgpuConfig,
    apply_node_config,
    load_device_config,
    load_node_config,
)

DEVICE_CONFIG = """
nvidia:
  resourceCountName: nvidia.com/vgpu
  deviceSplitCount: 4
  deviceMemoryScaling: 2
  libCudaLogLevel: 3
  disableCoreLimit: true
  migProfileAllowlist: []
"""


def test_device_config_yaml_overrides_only_what_it_sets(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(DEVICE_CONFIG)
    flags = VgpuConfig(device_core_scaling=0.5, enable_numa_topology=True)
    config = load_device_config(flags, path)
    assert (config.resource_name, config.device_split_count, config.device_memory_scaling) == (
        "nvidia.com/vgpu",
        4,
        2.0,
    )
    assert config.lib_cuda_log_level == "3"
    assert config.disable_core_limit
    assert config.device_core_scaling == 0.5  # not in the file: the flag stays
    assert config.enable_numa_topology


def test_bad_device_config_is_named(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  deviceSplitCount: many\n")
    with pytest.raises(ConfigError, match=r"deviceSplitCount|device_split_count"):
        load_device_config(VgpuConfig(), path)
    with pytest.raises(ConfigError, match="cannot read device config"):
        load_device_config(VgpuConfig(), tmp_path / "missing.yaml")


def test_node_entries_apply_in_order_and_zero_values_win() -> None:
    base = VgpuConfig(enable_numa_topology=True, lib_cuda_log_level="3")
    document = {
        "nodeconfig": [
            {"name": "gpu-node-1", "devicesplitcount": 5, "operatingmode": "mps"},
            {"name": "other", "devicesplitcount": 7},
            {
                "name": "gpu-node-1",
                "deviceSplitCount": 6,
                "enablenumatopology": False,
                "libcudaloglevel": "",
                "filterdevices": {"uuid": ["GPU-x"], "index": [3]},
                "enablegetpreferredallocation": True,
            },
        ]
    }
    config = apply_node_config(base, document, "gpu-node-1", "config.json")
    assert config.device_split_count == 6
    assert config.operating_mode == "mps"
    assert config.enable_numa_topology is False  # HAMi cannot turn it off per node
    assert config.lib_cuda_log_level == ""
    assert config.enable_preferred_allocation
    assert config.device_filter == DeviceFilter(uuids=frozenset({"GPU-x"}), indices=frozenset({3}))
    assert config.device_filter.hides("GPU-y", 3)


def test_node_entry_numbers_as_text_nulls_and_other_nodes() -> None:
    base = VgpuConfig(device_split_count=4, device_filter=DeviceFilter(uuids=frozenset({"GPU-x"})))
    document = {
        "nodeconfig": [
            {"name": "other", "devicesplitcount": "not checked: not this node"},
            {"NAME": "n", "LibCudaLogLevel": 3, "devicesplitcount": None, "filterDevices": None},
        ]
    }
    config = apply_node_config(base, document, "n", "config.json")
    assert config.lib_cuda_log_level == "3"
    assert config.device_split_count == 4  # null is absent
    assert config.device_filter == DeviceFilter()  # a present filterdevices replaces the filter


@pytest.mark.parametrize(
    "document, match",
    [
        (
            {"nodeconfig": [{"name": "n", "devicesplitcount": "ten"}]},
            r"nodeconfig\[0\]: devicesplitcount: Input should be a valid integer, got 'ten'",
        ),
        (
            {"nodeconfig": [{"name": "n", "enablenumatopology": 1}]},
            "enablenumatopology: Input should be a valid boolean",
        ),
        ({"nodeconfig": [{"name": "n", "DeviceSplitCount": True}]}, "devicesplitcount: Input"),
        ({"nodeconfig": {"name": "n"}}, "'nodeconfig' must be a list"),
        ({"nodeconfig": [{"name": "n", "filterdevices": {"index": [-1]}}]}, "filterdevices.index"),
        ([], "expected an object"),
    ],
)
def test_bad_node_config_names_the_key(document: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        apply_node_config(VgpuConfig(), document, "n", "config.json")


@pytest.mark.parametrize(
    "config, match",
    [
        (VgpuConfig(device_split_count=0), "deviceSplitCount must be 1..512"),
        (VgpuConfig(device_memory_scaling=0), "deviceMemoryScaling must be > 0"),
        (VgpuConfig(resource_name="gpu"), "needs a domain"),
        (VgpuConfig(operating_mode="mig"), "dynamic MIG"),
    ],
)
def test_check_refuses_nonsense(config: VgpuConfig, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config.check("test")


def test_missing_node_file_changes_nothing_and_bad_json_is_named(tmp_path: Path) -> None:
    assert load_node_config(VgpuConfig(), tmp_path / "none.json", "n") == VgpuConfig()
    bad = tmp_path / "config.json"
    bad.write_text("{nodeconfig: [")
    with pytest.raises(ConfigError, match=r"config\.json: not valid JSON"):
        load_node_config(VgpuConfig(), bad, "n")
    bad.write_text(json.dumps({"nodeconfig": [{"name": "n", "devicecorescaling": 0.5}]}))
    assert load_node_config(VgpuConfig(), bad, "n").device_core_scaling == 0.5
