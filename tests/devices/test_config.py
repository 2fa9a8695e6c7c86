import pytest

from pyhami.devices.config import DeviceConfigError, NvidiaConfig, parse_device_config

CHART_LIKE = """
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuCorePolicy: default
  knownMigGeometries: []   # gone in v2.10: ignored like any unknown key
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "7g.40gb"]
cambricon:
  resourceCountName: cambricon.com/vmlu
"""


def test_chart_file_parses_with_hami_defaults() -> None:
    config = parse_device_config(CHART_LIKE)
    assert config.nvidia == NvidiaConfig.model_validate(
        {"migProfileAllowlist": [{"models": ["A100-SXM4-40GB"],
                                  "profiles": ["1g.5gb", "2g.10gb", "7g.40gb"]}]}
    )
    assert config.nvidia.resource_memory_name == "nvidia.com/gpumem"
    assert config.nvidia.default_gpu_num == 1
    assert config.nvidia.memory_factor == 1


def test_other_names_are_honoured() -> None:
    config = parse_device_config("nvidia:\n  resourceCountName: hami.io/gpu\n  memoryFactor: 4\n")
    assert config.nvidia.resource_count_name == "hami.io/gpu"
    assert config.nvidia.memory_factor == 4
    assert config.nvidia.resource_core_name == "nvidia.com/gpucores"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no vendor section"),
        ("nvidia: {}\n", "no vendor section"),
        ("- a\n- b\n", "expected a mapping"),
        ("nvidia: [1]\n", "nvidia: expected a mapping"),
        ("nvidia:\n  memoryFactor: lots\n", "memoryFactor"),
        ("nvidia: {defaultCores: 1, x: [\n", "not valid YAML"),
        ("nvidia:\n  migProfileAllowlist: [{models: [A30]}]\n", "must define models and profiles"),
        (
            "nvidia:\n  migProfileAllowlist: [{models: [A30], profiles: [big]}]\n",
            'invalid MIG profile "big"',
        ),
    ],
)
def test_bad_config_is_a_clear_error(text: str, match: str) -> None:
    with pytest.raises(DeviceConfigError, match=match):
        parse_device_config(text, source="test.yaml")
