"""Vendor device backends behind one small interface; NVIDIA first.

- `config`: HAMi's `device-config.yaml` (pydantic, the chart's defaults);
- `quantity`: exact Kubernetes quantities;
- `nvidia`: request parsing, Fit, MIG placement, topology choice, pod card selectors;
- `inventory`: what a node offers (cards, pair scores, cordoned cards);
- `reasons`: the per-card reason codes, whose values are HAMi's words.
Pure: no I/O, no clock.
"""
