"""Kubernetes' own binaries for tests and the demo: built from Kubernetes' Go modules.

`pyhami control-plane build` compiles kube-apiserver, kube-controller-manager, kube-scheduler,
kubectl and etcd at one pinned release into a cache folder; `pyhami.testing.real_cluster` runs
them. Go is used only for this build; nothing of pyhami itself is written in Go. The services
never import this package (a contract in pyproject.toml).
"""

from pyhami.controlplane.build import (
    BuildError,
    BuiltBinaries,
    build_control_plane,
    default_cache_root,
    find_built,
)
from pyhami.controlplane.versions import KUBERNETES_VERSION

__all__ = [
    "KUBERNETES_VERSION",
    "BuildError",
    "BuiltBinaries",
    "build_control_plane",
    "default_cache_root",
    "find_built",
]
