"""GDRCOPY/GDS/MOFED and IMEX channels: flag parsing, channel discovery, the env they give."""

import logging
from pathlib import Path

import pytest

from pyhami.deviceplugin.toolkit import (
    ToolkitConfigError,
    ToolkitFeatures,
    imex_channels,
    is_char_device,
    parse_imex_channel_ids,
)


def test_channel_ids_as_go_int_slices_are_written_with_only_channel_zero_allowed() -> None:
    assert parse_imex_channel_ids("") == ()
    assert parse_imex_channel_ids("0") == (0,)
    assert parse_imex_channel_ids(" 0, 0 ") == (0,)
    with pytest.raises(ToolkitConfigError, match=r"only channel 0 is supported, got '0,1'"):
        parse_imex_channel_ids("0,1")
    with pytest.raises(ToolkitConfigError, match=r"'x' is not an integer"):
        parse_imex_channel_ids("x")


def test_a_channel_is_found_in_this_containers_dev_or_under_the_host_dev_root(
    tmp_path: Path,
) -> None:
    host_node = tmp_path / "dev/nvidia-caps-imex-channels/channel0"
    assert imex_channels((0,), tmp_path, required=True, present=lambda p: p == host_node) == (0,)
    container_node = Path("/dev/nvidia-caps-imex-channels/channel0")
    assert imex_channels((0,), tmp_path, required=True, present=lambda p: p == container_node) == (
        0,
    )


def test_a_missing_channel_is_an_error_when_required_and_skipped_otherwise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ToolkitConfigError, match=r"--imex-required: IMEX channel 0 has no"):
        imex_channels((0,), tmp_path, required=True)
    with caplog.at_level(logging.WARNING):
        assert imex_channels((0,), tmp_path, required=False) == ()
    assert "IMEX channel 0 not found" in caplog.text


def test_only_character_devices_count(tmp_path: Path) -> None:
    regular = tmp_path / "channel0"
    regular.write_text("")
    assert not is_char_device(regular)
    assert not is_char_device(tmp_path / "missing")
    assert is_char_device(Path("/dev/null"))


def test_env_in_hamis_order_and_nothing_when_off() -> None:
    assert ToolkitFeatures().env() == ()
    features = ToolkitFeatures(gdrcopy=True, gds=True, mofed=True, imex_channels=(0,))
    assert features.env() == (
        ("NVIDIA_IMEX_CHANNELS", "0"),
        ("NVIDIA_GDRCOPY", "enabled"),
        ("NVIDIA_GDS", "enabled"),
        ("NVIDIA_MOFED", "enabled"),
    )
