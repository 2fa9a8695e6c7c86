"""The DRA driver for driver name `gpu.pyhami.io` (`pyhami dra-driver`).

Kept free of imports so that `pyhami.dra.api` (the kubelet protocols) loads alone.
The pieces, top down:
    cli          the `pyhami dra-driver` command
    service      the process: slices publisher, DRA plugin server, registration socket
    plugin       the DRAPlugin and Registration servicers
    prepare      a claim's allocation -> CDI spec, limits file, checkpoint entry; and undo
    checkpoint   prepared claims on disk, so a restart answers the same
    cdi          CDI spec files
    slices       one ResourceSlice per node from the GPUs and their health
"""
