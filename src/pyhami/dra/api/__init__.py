"""kubelet's DRA plugin API v1 and plugin-registration API v1: our own `.proto` copies, compiled
code checked in beside them.

Regenerate after editing a .proto (from the repository root; the command is also in dra.proto):
    python -m grpc_tools.protoc -I src --python_out=src --grpc_python_out=src \
        --mypy_out=src --mypy_grpc_out=src \
        src/pyhami/dra/api/dra.proto src/pyhami/dra/api/pluginregistration.proto
"""

from pathlib import Path

from pyhami.devices.nvidia.dra_claims import DRIVER as DRIVER  # the driver name, one place

# PluginInfo.type a DRA driver registers with.
PLUGIN_TYPE = "DRAPlugin"
# For DRA plugins, PluginInfo.supported_versions lists the gRPC services served.
DRA_PLUGIN_SERVICE = "v1.DRAPlugin"
# kubelet watches this directory for registration sockets of every plugin kind.
KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
# A driver's own sockets and state live in <KUBELET_PLUGINS_DIR>/<driver name>.
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
