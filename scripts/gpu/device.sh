#!/usr/bin/env bash
# On the lent GPU host, in the repository root (the working tree travels with every run).
#   scripts/gpu/device.sh stage            copy the carried chunk(s) .gpu/wheels/c* to /tmp (one
#                                          run per chunk; /tmp survives between runs while the
#                                          host stays up)
#   scripts/gpu/device.sh run [SERVERS]    install (once), build the random model, run
#                                          benchmarks/gpu_compare.py for SERVERS (default: all),
#                                          copy results, logs and traces to $OUT
#   scripts/gpu/device.sh calibrate        install (once), build the random model, start edgeserve
#                                          (split, the run's sizing) with a trace, drive it through
#                                          `edgeserve calibrate record` (BUDGET s, IMAGE_RATE/s),
#                                          stop it, archive trace and logs to $OUT
#   scripts/gpu/device.sh tp-layouts [STEPS]  on a 2-GPU host: install (once), build qwen2-vl-7b,
#                                          run benchmarks/tp_layouts.py for STEPS (allreduce,
#                                          2xTP1, 1xTP2; default all), copy results and logs
# Settings (environment): SHAPE (qwen2-vl-2b), TOKENS (1280), RATES, DURATION, API_SERVERS,
# RENDER_THREADS (4, vllm-best's --renderer-num-workers), BUDGET (150), IMAGE_RATE (8); for
# `run`, SIZES (the photos' size mix, default 12mp) and OUTPUT_LEN (32-64) with TAG naming the
# workload (its parts, results and archive are kept apart from the default workload's).
set -euo pipefail
cd "$(dirname "$0")/../.."
STAGE=/tmp/edgeserve_wheels SITE=/tmp/edgeserve_site PARTS=/tmp/edgeserve_gpu_compare
OUT=${OUT:-/tmp/edgeserve_out}
mkdir -p "$STAGE" "$OUT"
export PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 \
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}

install_once() {
    if [[ ! -f "$SITE/.installed" ]]; then
        $PY -m edgeserve.gpu_harness.install "$STAGE" "$SITE"
        touch "$SITE/.installed"
        echo "installed in $(( $(date +%s) - t0 )) s"
    fi
    $PY -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name(), "x", torch.cuda.device_count())'
    $PY setup.py -q build_ext --inplace --build-temp /tmp/mm-native >/dev/null 2>&1 \
        && echo "mm_preproc C kernel built" || echo "mm_preproc C kernel not built (numpy path)"
}

model_folder() {  # model_folder SHAPE: MODEL=its random-weight folder, built once
    MODEL=/tmp/edgeserve_models/$1
    [[ -f "$MODEL/config.json" ]] || $PY -m edgeserve models build-random "$1" --out "$MODEL"
}

# At most 8 files come back from $OUT: the merged JSON, table and log stay as they are; the parts,
# server logs (their last 400 kB), traces and GPU samples of a budget go into one archive.
archive() {  # archive BUDGET_DIR OUT_TGZ
    local budget=$1 keep=/tmp/edgeserve_keep f
    rm -rf "$keep"; mkdir -p "$keep/logs"
    cp "$budget"/*.json "$budget"/gpu_busy.csv "$keep"/ 2>/dev/null || true
    for f in "$budget"/logs/*.log; do [[ -f $f ]] && tail -c 400000 "$f" > "$keep/logs/$(basename "$f")"; done
    if [[ -d "$budget/traces" ]]; then cp -r "$budget/traces" "$keep/"; fi
    tar czf "$2" -C "$keep" .
}

case "${1:-}" in
stage)
    shopt -s nullglob
    chunks=(.gpu/wheels/c*)
    [[ ${#chunks[@]} -gt 0 ]] || { echo "no chunk carried (carry .gpu/wheels/cN)" >&2; exit 2; }
    for c in "${chunks[@]}"; do cp "$c"/* "$STAGE"/; echo "staged $c"; done
    [[ -f .gpu/wheels/manifest.json ]] && cp .gpu/wheels/manifest.json "$STAGE"/
    du -sh "$STAGE"
    ;;
tp-layouts)
    t0=$(date +%s)
    install_once
    model_folder qwen2-vl-7b
    args=(--model "$MODEL" --image-tokens "${TOKENS:-1280}" --parts /tmp/edgeserve_tp_layouts
          --out "$OUT/tp_layouts.json")
    [[ -n "${2:-}" ]] && args+=(--steps "$2")
    [[ -n "${RATES:-}" ]] && args+=(--rates "$RATES")
    [[ -n "${DURATION:-}" ]] && args+=(--duration "$DURATION")
    rc=0
    $PY benchmarks/tp_layouts.py "${args[@]}" 2>&1 | tee "$OUT/tp_layouts.log" || rc=$?
    budget="/tmp/edgeserve_tp_layouts/qwen2-vl-7b-${TOKENS:-1280}tok"
    archive "$budget" "$OUT/tp_layouts-parts.tgz"
    echo "done in $(( $(date +%s) - t0 )) s, rc $rc"
    exit $rc
    ;;
calibrate)
    t0=$(date +%s)
    install_once
    SHAPE=${SHAPE:-qwen2-vl-2b}
    model_folder "$SHAPE"
    CAL=/tmp/edgeserve_calibrate; rm -rf "$CAL"; mkdir -p "$CAL"
    pixels=$($PY -c "from mm_preproc.spec import read_spec; print(read_spec('$MODEL').budget(${TOKENS:-1280}))")
    $PY -m edgeserve serve --model "$MODEL" --max-pixels "$pixels" --max-model-len 4096 \
        --max-num-seqs 64 --gpu-memory-utilization 0.85 --port 8200 --trace "$CAL/calibration.jsonl" \
        --engine-log "$CAL/engine.log" > "$CAL/server.log" 2>&1 &
    server=$!
    $PY -m edgeserve.bench.proc_sampler $server "$CAL/threads.csv" > /dev/null 2>&1 &
    lscpu > "$CAL/lscpu.txt" 2>&1 || true
    for _ in $(seq 400); do
        $PY -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8200/health', timeout=2)" \
            2>/dev/null && break
        kill -0 $server 2>/dev/null || { tail -20 "$CAL/server.log"; exit 1; }
        sleep 1
    done
    echo "server ready after $(( $(date +%s) - t0 )) s"; grep -E "dtype|encoder|render threads|warm-up" "$CAL/server.log" | head -8 || true
    rc=0
    $PY -m edgeserve calibrate record --url http://127.0.0.1:8200 --out "$CAL/schedule.jsonl" \
        --model "$MODEL" --max-num-seqs 64 --max-pixels "$pixels" --budget-s "${BUDGET:-150}" \
        --image-rate "${IMAGE_RATE:-8}" 2>&1 | tee "$CAL/record.log" || rc=$?
    kill -TERM $server; wait $server || true
    tar czf "$OUT/calibrate-$SHAPE-${TOKENS:-1280}tok${TAG:+-$TAG}.tgz" -C "$CAL" .
    echo "done in $(( $(date +%s) - t0 )) s, rc $rc"
    exit $rc
    ;;
run)
    t0=$(date +%s)
    install_once
    SHAPE=${SHAPE:-qwen2-vl-2b}
    model_folder "$SHAPE"
    [[ -n "${TAG:-}" ]] && PARTS="${PARTS}_$TAG"
    args=(--model "$MODEL" --image-tokens "${TOKENS:-1280}" --parts "$PARTS"
          --out "$OUT/gpu_compare${TAG:+_$TAG}.json" --api-servers "${API_SERVERS:-4}"
          --render-threads "${RENDER_THREADS:-4}")
    [[ -n "${2:-}" ]] && args+=(--servers "$2")
    [[ -n "${SIZES:-}" ]] && args+=(--sizes "$SIZES")
    [[ -n "${OUTPUT_LEN:-}" ]] && args+=(--output-len "$OUTPUT_LEN")
    [[ -n "${RATES:-}" ]] && args+=(--rates "$RATES")
    [[ -n "${DURATION:-}" ]] && args+=(--duration "$DURATION")
    rc=0
    $PY benchmarks/gpu_compare.py "${args[@]}" 2>&1 | tee "$OUT/gpu_compare${TAG:+_$TAG}.log" || rc=$?
    budget="$PARTS/$SHAPE-${TOKENS:-1280}tok"
    archive "$budget" "$OUT/run-$SHAPE-${TOKENS:-1280}tok${TAG:+-$TAG}.tgz"
    echo "done in $(( $(date +%s) - t0 )) s, rc $rc"
    exit $rc
    ;;
*)
    sed -n 2,12p "$0"; exit 2 ;;
esac
