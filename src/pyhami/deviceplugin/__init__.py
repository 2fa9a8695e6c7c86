"""The NVIDIA device plugin (`pyhami device-plugin`), wire-compatible with HAMi's.

Kept free of imports so that `pyhami.deviceplugin.api` (the kubelet protocol) loads alone.
The pieces, top down:
    service.DevicePlugin(kube, nvml, PluginOptions(...), load_config).run(stop)  the process
    server       DevicePlugin gRPC servicer on our unix socket, Register with kubelet
    register     node annotation `hami.io/node-nvidia-register` (+ pair scores) every 30 s
    health       XID events -> unhealthy in ListAndWatch and the annotation, and recovery
    allocator    Allocate / GetPreferredAllocation against the API (effects)
    allocation   the pure builders: entry for a container, env, mounts, limits file
    binding      the pod being bound on this node; bind-phase and node-lock release
    config       defaults < flags < device-config YAML < per-node JSON
    listing, topology, inventory   replica ids, pair scores, GPUs from NVML
"""
