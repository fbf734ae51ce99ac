"""Running the benchmark on a lent GPU host: the wheels it lacks, packed to travel, and the run.

A lent GPU host has a Python, a CUDA torch and no network; what a run carries is limited to
64 MiB per call. :mod:`.resolve` works out, from the host's ``pip list``, which wheels a pinned
vLLM and edgeserve need on top of what is installed there; :mod:`.pack` downloads them for the
host's platform and packs them into chunks of at most 52 MiB (big wheels split, each part with its
sha256) with a manifest; ``scripts/gpu/`` reassembles, installs and runs the benchmark on the host.
"""
