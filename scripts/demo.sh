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
grep "machine:\|dtype \|encoder \|KV cache\|warm-up\|ready on" "$OUT/serve.log"

# The rate offered follows this machine: a short closed-loop probe (PROBE_N requests, at most
# PROBE_CONCURRENCY in flight, so the slowest stage never idles) measures the requests per second
# it sustains; the main run offers DEMO_LOAD of that (60 %: queues stay short, latencies are the
# server's own). EDGESERVE_DEMO_RATE fixes the rate instead.
PROBE_N="${EDGESERVE_DEMO_PROBE_N:-12}"
PROBE_CONCURRENCY="${EDGESERVE_DEMO_PROBE_CONCURRENCY:-4}"
DEMO_LOAD="${EDGESERVE_DEMO_LOAD:-0.6}"
echo "== probe: $PROBE_N requests with one 12 MP photograph each, $PROBE_CONCURRENCY in flight"
$ES bench run --url "http://127.0.0.1:$PORT" --images 12mp --num-prompts "$PROBE_N" \
    --max-concurrency "$PROBE_CONCURRENCY" --output-len 16 --save-result "$OUT/probe.json" > "$OUT/probe.log"
RATE=$(.venv/bin/python - "$OUT/probe.json" "$DEMO_LOAD" "${EDGESERVE_DEMO_RATE:-}" <<'PY'
import json, sys
done = json.load(open(sys.argv[1]))
sustained = float(done["request_throughput"])
rate = float(sys.argv[3]) if sys.argv[3] else round(float(sys.argv[2]) * sustained, 2)
print(f"   this machine sustains {sustained:.2f} req/s ({done['completed']} requests in "
      f"{done['duration']:.1f} s); offering {rate:g} req/s "
      f"({'EDGESERVE_DEMO_RATE' if sys.argv[3] else f'{float(sys.argv[2]):.0%} of it'})",
      file=sys.stderr)
print(max(rate, 0.05))
PY
)

echo "== edgeserve bench run: 24 requests with one 12 MP photograph each at $RATE req/s"
$ES bench run --url "http://127.0.0.1:$PORT" --images 12mp --num-prompts 24 --request-rate "$RATE" \
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
