from datetime import timedelta

import pytest

from pyhami.scheduler.settings import (
    SchedulerSettings,
    SettingsError,
    parse_go_duration,
    parse_label_selector,
    split_host_port,
)


@pytest.mark.parametrize(
    "text, want",
    [
        ("5m", timedelta(minutes=5)),
        ("28s", timedelta(seconds=28)),
        ("0", timedelta(0)),
        ("1h30m", timedelta(minutes=90)),
        ("100ms", timedelta(milliseconds=100)),
        ("1.5s", timedelta(seconds=1.5)),
    ],
)
def test_go_durations(text: str, want: timedelta) -> None:
    assert parse_go_duration(text, "--x") == want


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "time: invalid duration"),
        ("5", "time: missing unit"),
        ("5 m", "time: unknown unit"),
        ("m5", "time: invalid duration"),
        ("5x", "time: unknown unit"),
        ("-5m", "invalid duration '-5m': it must not be negative"),
    ],
)
def test_bad_durations_name_the_flag(text: str, why: str) -> None:
    with pytest.raises(SettingsError, match=f"^--node-lock-timeout: {why}"):
        parse_go_duration(text, "--node-lock-timeout")


def test_label_selector_and_addresses() -> None:
    assert parse_label_selector("gpu=on, zone = a") == {"gpu": "on", "zone": "a"}
    assert parse_label_selector("") == {}
    with pytest.raises(SettingsError, match="not key=value"):
        parse_label_selector("gpu")
    assert split_host_port(":9395", "--m") == ("0.0.0.0", 9395)
    assert split_host_port("127.0.0.1:443", "--m") == ("127.0.0.1", 443)
    with pytest.raises(SettingsError, match="--m: 'x' is not host:port"):
        split_host_port("x", "--m")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"device_config_file": ""}, "--device-config-file is required"),
        ({"node_scheduler_policy": "best"}, "--node-scheduler-policy"),
        ({"cert_file": "a.crt"}, "must be given together"),
        ({"leader_elect": True}, "--leader-elect-resource-name"),
        (
            {
                "leader_elect": True,
                "leader_elect_resource_name": "l",
                "leader_elect_resource_namespace": "ns",
            },
            "identity",
        ),
        ({"http_bind": "nope"}, "--http_bind"),
    ],
)
def test_settings_refuse_bad_combinations(kwargs: dict, words: str) -> None:
    base = {"device_config_file": "/etc/device-config.yaml"}
    with pytest.raises(SettingsError, match=words):
        SchedulerSettings(**{**base, **kwargs})
