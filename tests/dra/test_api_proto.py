"""Our DRA and plugin-registration protos speak kubelet's v1 wire format, and the checked-in code
matches them."""

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FileDescriptor

from pyhami.dra.api import dra_pb2, pluginregistration_pb2

SRC = Path(__file__).resolve().parents[2] / "src"
API = SRC / "pyhami/dra/api"

# (message, field, number) exactly as k8s.io/kubelet/pkg/apis/dra/v1 and .../pluginregistration/v1
# declare them.
DRA_FIELDS = [
    ("NodePrepareResourcesRequest", "claims", 1),
    ("NodePrepareResourcesResponse", "claims", 1),
    ("NodePrepareResourceResponse", "devices", 1),
    ("NodePrepareResourceResponse", "error", 2),
    ("Device", "request_names", 1),
    ("Device", "pool_name", 2),
    ("Device", "device_name", 3),
    ("Device", "cdi_device_ids", 4),
    ("Device", "share_id", 5),
    ("NodeUnprepareResourcesRequest", "claims", 1),
    ("NodeUnprepareResourcesResponse", "claims", 1),
    ("NodeUnprepareResourceResponse", "error", 1),
    ("Claim", "namespace", 1),
    ("Claim", "uid", 2),
    ("Claim", "name", 3),
]
REGISTRATION_FIELDS = [
    ("PluginInfo", "type", 1),
    ("PluginInfo", "name", 2),
    ("PluginInfo", "endpoint", 3),
    ("PluginInfo", "supported_versions", 4),
    ("RegistrationStatus", "plugin_registered", 1),
    ("RegistrationStatus", "error", 2),
]


@pytest.mark.parametrize(
    "descriptor, message, field, number",
    [(dra_pb2.DESCRIPTOR, *f) for f in DRA_FIELDS]
    + [(pluginregistration_pb2.DESCRIPTOR, *f) for f in REGISTRATION_FIELDS],
)
def test_field_numbers_match_kubelet(
    descriptor: FileDescriptor, message: str, field: str, number: int
) -> None:
    assert descriptor.message_types_by_name[message].fields_by_name[field].number == number


def test_share_id_is_optional_as_in_kubelet() -> None:
    share_id = dra_pb2.DESCRIPTOR.message_types_by_name["Device"].fields_by_name["share_id"]
    assert share_id.has_presence
    assert not dra_pb2.Device().HasField("share_id")


def test_packages_and_methods_are_kubelets() -> None:
    # The package names are part of every gRPC method path kubelet calls.
    assert dra_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert pluginregistration_pb2.DESCRIPTOR.package == "pluginregistration"
    dra = dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert dra.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert [m.name for m in dra.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    registration = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert [m.name for m in registration.methods] == ["GetInfo", "NotifyRegistrationStatus"]


def test_checked_in_code_is_what_the_documented_command_generates(tmp_path: Path) -> None:
    protos = ["pyhami/dra/api/dra.proto", "pyhami/dra/api/pluginregistration.proto"]
    (tmp_path / "pyhami/dra/api").mkdir(parents=True)
    for proto in protos:
        (tmp_path / proto).write_bytes((SRC / proto).read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            *protos,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for stem in ("dra", "pluginregistration"):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            name = stem + suffix
            generated = (out / "pyhami/dra/api" / name).read_text()
            assert generated == (API / name).read_text(), (
                f"{name} is stale: rerun the command in dra.proto"
            )
