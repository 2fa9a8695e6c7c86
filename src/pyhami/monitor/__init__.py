"""The vGPU monitor: HAMi-core shared regions to Prometheus metrics, and priority feedback.

layout    the v0/v1 byte layouts, every offset in one table (`V0`, `V1`)
region    `Region.open(path)` (regular files only, read with pread, never mapped),
          `.snapshot()`, `.feedback()`, and the two writes the monitor makes:
          `write_recent_kernel`, `write_utilization_switch`; bad files raise `RegionError`
          with a `RejectReason`
scan      `RegionDirectory(root, grace_seconds).update(pods_on_node, now)`: open, reopen,
          close, delete orphans after the grace period
feedback  `observe(regions)`: one 5 s census + freeze/switch pass
pods      `PodSource` (pods labelled `hami.io/vgpu-node=<node>`), `InformerPodSource`
metrics   `MonitorCollector`, `monitor_registry`
service   `MonitorService`: the loop, `/metrics`, `/healthz`
cli       `pyhami monitor`
"""
