#!/usr/bin/env bash
# Here, before a GPU is lent (no GPU time): the wheels the GPU host lacks for vLLM and edgeserve,
# downloaded for its platform and packed into chunks of at most 52 MiB under .gpu/wheels
# (git-ignored), with manifest.json. HOST_PIP_LIST defaults to the H200 host's recorded list.
#   scripts/gpu/pack.sh [HOST_PIP_LIST] [VLLM_VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu
PIP_LIST=${1:-tests/data/gpu/h200_pip_list.txt}
VLLM=${2:-0.26.0}
# A run carries at most 64 MiB: one chunk, the manifest and the working tree (the tracked files).
TREE_MIB=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{print int($1 / 1048576) + 1}')
CHUNK_MIB=${CHUNK_MIB:-$(( 62 - TREE_MIB > 52 ? 52 : 62 - TREE_MIB ))}
echo "working tree ${TREE_MIB} MiB: chunks of at most ${CHUNK_MIB} MiB"
python -m edgeserve.gpu_harness pack --pip-list "$PIP_LIST" --vllm "$VLLM" --python "${HOST_PYTHON:-3.12}" \
    --chunk-mib "$CHUNK_MIB" --out .gpu/wheels > .gpu/plan.json 2> >(grep -v "is ignored" >&2) || { echo "pack failed" >&2; exit 1; }
tail -1 .gpu/plan.json
echo "carry one chunk per run: .gpu/wheels/c1 … (and .gpu/wheels/manifest.json with each); see docs/gpu.md"
