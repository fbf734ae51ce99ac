#!/usr/bin/env bash
# Record the two small runtime traces that tests/sim/test_validate.py calibrates and validates on:
# the default `edgeserve serve` (tiny model) driven for 20 s each by `edgeserve bench run`, with
# different image mixes and rates. Writes tests/sim/data/{calib,heldout}.jsonl, and
# tests/sim/data/calib_onnx.jsonl (tests/sim/test_calibrate_encoder.py) from `edgeserve serve
# --encoder onnx`: the vision tower in the workers, three image sizes for its quadratic cost.
# `./scripts/record_test_traces.sh onnx` records only that one.
set -euo pipefail
cd "$(dirname "$0")/.."
ES=.venv/bin/edgeserve
OUT=tests/sim/data
mkdir -p "$OUT"

record() {
    local name=$1; shift
    local serve_args=()
    while [[ $# -gt 0 && $1 != -- ]]; do serve_args+=("$1"); shift; done
    shift  # --
    local port=$((18000 + RANDOM % 1000))
    $ES serve "${serve_args[@]}" --port "$port" --trace "$OUT/$name.jsonl" --engine-log "/tmp/record-$name.log" \
        > "/tmp/record-$name.out" 2>&1 &
    local server=$!
    for _ in $(seq 1 300); do
        curl -fs "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
        kill -0 $server 2>/dev/null || { cat "/tmp/record-$name.out"; exit 1; }
        sleep 1
    done
    $ES bench run --url "http://127.0.0.1:$port" --no-progress "$@" > /dev/null
    kill -TERM $server; wait $server || true
    echo "$name: $(wc -l < "$OUT/$name.jsonl") lines, $(du -h "$OUT/$name.jsonl" | cut -f1)"
}

if [[ ${1:-all} != onnx ]]; then
    record calib -- --images 1mp --request-rate 2 --duration 20 --output-len 16 --seed 1
    record heldout -- --images 640x480:1,1280x720:1 --request-rate 3 --duration 20 \
        --output-len 8-24 --seed 2
fi
record calib_onnx --encoder onnx -- --images 448x336:1,896x672:1,1280x800:1 --request-rate 1.5 \
    --duration 15 --output-len 8 --seed 3
