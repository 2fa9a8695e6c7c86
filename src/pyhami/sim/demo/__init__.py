"""`pyhami demo`: the whole system on localhost, no Kubernetes and no GPU.

settings  `DemoSettings(nodes, gpus, ...)`: the nodes and their cards (`card_uuid(node, index)`)
cluster   `DemoCluster(settings, runtime=...)`: API double, scheduler (webhook over TLS),
          kube-scheduler harness, simulated GPU nodes (device plugin on FakeNVML, fake kubelet
          with `NodeAgent`, monitor); the system tests start this same stack
pods      the example pods (`pods.yaml`, the HAMi user stories) or a user's file
run       `submit_all(cluster, pods)`: create each pod, follow it, ask `/explain` when unfit
results   `PodResult`, `CardShare`, `NodeWhy`: what became of each pod
report    the progress lines and the outcome table
cli       the `pyhami demo` command
"""
