#!/usr/bin/env bash
# The main job on the built-in default: serve the tiny Qwen2-VL with edgeserve (preprocessing in
# worker processes, real vLLM engine on the CPU), drive it with photographs, show the stage
# breakdown and stalls, export the trace for a trace viewer, and run the default edge simulation.
# Everything lands in out/demo/. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
ES=.venv/bin/edgeserve
OUT=out/demo
PORT="${EDGESERVE_DEMO_PORT:-8321}"
mkdir -p "$OUT"

echo "== edgeserve serve (tiny Qwen2-VL, split mode) on port $PORT; log: $OUT/serve.log, vLLM's: $OUT/engine.log"
$ES serve --port "$PORT" --trace "$OUT/trace.jsonl" --engine-log "$OUT/engine.log" > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    if curl -fs "http://127.0.0.1:$PORT/health" > /dev/null 2>&1; then break; fi
    if ! kill -0 $SERVER 2>/dev/null; then echo "the server exited:"; cat "$OUT/serve.log"; exit 1; fi
    sleep 1
done
curl -fs "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not become healthy in 300 s"; exit 1; }
grep "KV cache\|ready on" "$OUT/serve.log"

echo "== edgeserve bench run: 24 requests with one 12 MP photograph each at 2 req/s"
$ES bench run --url "http://127.0.0.1:$PORT" --images 12mp --num-prompts 24 --request-rate 2 \
    --output-len 16 --save-result "$OUT/bench.json" --plot "$OUT/latency_cdf.png"

kill -TERM $SERVER; wait $SERVER 2>/dev/null || true; trap - EXIT

echo "== edgeserve trace export → $OUT/trace.perfetto.json (open in ui.perfetto.dev)"
$ES trace export "$OUT/trace.jsonl" --perfetto -o "$OUT/trace.perfetto.json"

echo "== edgeserve sim run (built-in default scenario)"
$ES sim run --out "$OUT/sim" --plots

for f in bench.json latency_cdf.png trace.jsonl trace.perfetto.json sim; do
    [[ -e "$OUT/$f" ]] || { echo "the main job did not produce $OUT/$f"; exit 1; }
done
echo "== done: results in $OUT/ (watch a run live with: $ES tui --replay $OUT/trace.jsonl)"
