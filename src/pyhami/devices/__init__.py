"""Vendor device backends behind one small interface; NVIDIA first.

- `vendor`: the seam: the `Vendor` protocol the engine schedules through, the card state Fit
  reads, the share-of-card request arithmetic; `selectors`: a pod's per-card filters;
- `config`: HAMi's `device-config.yaml` (pydantic, the chart's defaults);
- `quantity`: exact Kubernetes quantities;
- `nvidia`: the one `Vendor` (`nvidia/vendor.py`): request parsing, Fit, MIG placement,
  topology choice, the pod's card selectors;
- `inventory`: what a node offers (cards, pair scores, cordoned cards);
- `reasons`: the per-card reason codes, whose values are HAMi's words.
Pure: no I/O, no clock.
"""
