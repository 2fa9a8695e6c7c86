"""kubelet's device-plugin API v1beta1: our own `api.proto`, compiled code checked in beside it.

Regenerate after editing api.proto (from the repository root; the command is also in the file):
    python -m grpc_tools.protoc -I src --python_out=src --grpc_python_out=src \
        --mypy_out=src --mypy_grpc_out=src src/pyhami/deviceplugin/api/api.proto
"""

from pathlib import Path

VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = DEVICE_PLUGIN_PATH / "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
