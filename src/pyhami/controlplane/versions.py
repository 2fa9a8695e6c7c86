"""The one place the control plane's versions are pinned.

etcd is not pinned here: the build takes the etcd server release that this Kubernetes release's
own go.mod requires (the one its integration tests run against), so the two always match.
"""

KUBERNETES_VERSION = "v1.37.2"
