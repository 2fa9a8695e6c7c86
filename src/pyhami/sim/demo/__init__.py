"""`pyhami demo`: the whole system on localhost, no Kubernetes and no GPU.

cluster   `DemoCluster(DemoSettings(...))`: API double, scheduler (webhook over TLS),
          kube-scheduler harness, simulated GPU nodes (device plugin on FakeNVML, fake kubelet
          with `NodeAgent`, monitor); the system tests start the same stack
certs     a throwaway CA and serving certificate
"""
