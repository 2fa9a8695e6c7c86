"""Host files HAMi's node components agree on, besides annotations.

`MIG_APPLY_LOCK`: HAMi's legacy MIG-apply lock, a host file. The vGPU
monitor pauses its feedback loop while it exists; the device plugin removes a stale one at
each start (an older plugin may have left it) and never creates it.
"""

MIG_APPLY_LOCK = "/tmp/hami/hami-mig-apply.lock"
