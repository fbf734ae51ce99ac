"""How much CPU does watching cost? ``edgeserve tui`` against 200 requests/s of live events.

Two processes besides this one, each pinned to its own core when there are two:

* an event server (aiohttp) that publishes ``/v1/events`` like ``edgeserve serve``: RATE request
  records a second (each with OUTPUT_TOKENS token timestamps, in batches every 50 ms) and one
  resource sample a second, plus a vLLM-style ``/metrics``;
* the UI (:class:`tui.app.TuiApp` with a :class:`tui.sources.live.LiveSource`), headless, full
  layout at 160×48 (``--layout compact``: 80×24), refreshing every ``--refresh`` seconds.

The UI's CPU time (user + system, from psutil) is read after a warm-up and again DURATION seconds
later. The reference, measured in the same run and alternated with it, is the same UI watching a
server that sends no events; the report gives both, their difference (the cost of the events) and
the budget: 3 % of one core at 1 Hz with 200 requests/s.

    .venv/bin/python benchmarks/tui_cpu.py [--rate 200] [--duration 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from edgeserve.net import free_port

ROOT = Path(__file__).resolve().parents[1]
BUDGET_PERCENT = 3.0
OUTPUT_TOKENS = 32


# ---- the event server (child process) -------------------------------------------------------
def run_server(port: int, rate: float) -> None:
    from aiohttp import web

    from edgeserve.records import RequestRecord, ResourceSample, encode
    from tests.tui.vllm_metrics_text import VLLM_METRICS

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = 0
        start = time.monotonic()
        next_sample = start + 1.0
        tick = 0.05
        while True:
            now = time.monotonic()
            due = int((now - start) * rate)
            chunk = []
            while n < due:
                n += 1
                t0 = now - 0.5
                toks = [t0 + 0.1 + 0.01 * k for k in range(OUTPUT_TOKENS)]
                rec = RequestRecord(
                    id=f"req-{n}",
                    worker=n % 4,
                    arrived_s=t0,
                    preproc_queued_s=t0,
                    preproc_start_s=t0 + 0.01,
                    decode_end_s=t0 + 0.03,
                    resize_end_s=t0 + 0.04,
                    normalize_end_s=t0 + 0.05,
                    preproc_end_s=t0 + 0.05,
                    engine_queued_s=t0 + 0.05,
                    first_token_s=toks[0],
                    token_times_s=toks,
                    last_token_s=toks[-1],
                    finished_s=toks[-1],
                    output_tokens=OUTPUT_TOKENS,
                    prompt_tokens=660,
                    image_tokens=638,
                    image_bytes=200_000,
                    num_images=1,
                )
                chunk.append(b"data: " + encode(rec) + b"\n")
            if now >= next_sample:
                next_sample += 1.0
                s = ResourceSample(
                    t_s=now,
                    preproc_queue=3,
                    preproc_running=4,
                    engine_waiting=1,
                    engine_running=8,
                    engine_busy=0.9,
                    stall_s=0.05,
                    worker_busy=[0.8, 0.7, 0.9, 0.6],
                    worker_stage=["decode", "resize", "", "normalize"],
                    system_cpu_percent=70.0,
                    system_mem_percent=40.0,
                )
                chunk.append(b"data: " + encode(s) + b"\n")
            if chunk:
                try:
                    await resp.write(b"".join(chunk))
                except ConnectionError:
                    return resp
            await asyncio.sleep(tick)

    async def quiet(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while True:
            await asyncio.sleep(15)
            try:
                await resp.write(b": keep-alive\n\n")
            except ConnectionError:
                return resp

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=VLLM_METRICS, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/v1/events", events if rate > 0 else quiet)
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


# ---- the UI (child process) ----------------------------------------------------------------
def run_ui(url: str, seconds: float, refresh_s: float, out: str, layout: str) -> None:
    from tui.app import TuiApp
    from tui.config import Layout, TuiConfig
    from tui.sources.live import LiveSource

    lay = Layout(layout)
    app = TuiApp(LiveSource(url), TuiConfig(refresh_s=refresh_s, layout=lay))

    def done() -> None:
        Path(out).write_text(
            json.dumps(
                {
                    "events": app.source.events_received,  # type: ignore[attr-defined]
                    "finished": app.state.finished_total,
                    "refreshes": app.refreshes,
                }
            )
        )
        app.exit()

    app.call_later(lambda: app.set_timer(seconds, done))
    app.run(headless=True, size=(160, 48) if lay is Layout.FULL else (80, 24))


# ---- the measurement -----------------------------------------------------------------------
def spawn(args: list[str], core: int | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, __file__, *args], cwd=ROOT, env=env)
    if core is not None:
        os.sched_setaffinity(p.pid, {core})
    return p


def wait_listening(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"event server did not start on port {port}")


def measure(
    rate: float,
    duration_s: float,
    warmup_s: float,
    refresh_s: float,
    cores: tuple[int | None, int | None],
    layout: str,
) -> dict[str, float]:
    port = free_port()
    server = spawn(["--_server", str(port), str(rate)], cores[0])
    out = ROOT / f".tui_cpu_{os.getpid()}_{rate:g}.json"
    try:
        wait_listening(port)
        ui = spawn(
            [
                "--_ui",
                f"http://127.0.0.1:{port}",
                str(warmup_s + duration_s + 2),
                str(refresh_s),
                str(out),
                layout,
            ],
            cores[1],
        )
        proc = psutil.Process(ui.pid)
        srv = psutil.Process(server.pid)
        time.sleep(warmup_s)
        c0, s0, t0 = sum(proc.cpu_times()[:2]), sum(srv.cpu_times()[:2]), time.monotonic()
        time.sleep(duration_s)
        c1, s1, t1 = sum(proc.cpu_times()[:2]), sum(srv.cpu_times()[:2]), time.monotonic()
        ui.wait(timeout=60)
        stats = json.loads(out.read_text())
    finally:
        server.kill()
        server.wait(timeout=10)
        out.unlink(missing_ok=True)
    return {
        "ui_cpu_percent": 100 * (c1 - c0) / (t1 - t0),
        "server_cpu_percent": 100 * (s1 - s0) / (t1 - t0),
        **stats,
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_server":
        run_server(int(sys.argv[2]), float(sys.argv[3]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_ui":
        run_ui(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="request records per second")
    ap.add_argument("--duration", type=float, default=30.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    ap.add_argument("--refresh", type=float, default=1.0, help="UI refresh interval")
    ap.add_argument("--rounds", type=int, default=2, help="alternating idle/loaded pairs")
    ap.add_argument(
        "--layout",
        choices=["full", "compact"],
        default="full",
        help="full: all panels at 160x48 (the worst case); compact: one panel, 80x24",
    )
    args = ap.parse_args()

    ncpu = len(os.sched_getaffinity(0))
    cores: tuple[int | None, int | None] = (0, 1) if ncpu >= 2 else (None, None)
    print(
        f"machine: {ncpu} cores available, {psutil.cpu_count()} total; event server on core "
        f"{cores[0]}, UI on core {cores[1]}; UI: {args.layout} layout, headless, "
        f"refresh {args.refresh:g} s; {args.rate:g} requests/s with {OUTPUT_TOKENS} tokens each"
    )
    idle: list[dict[str, float]] = []
    loaded: list[dict[str, float]] = []
    for r in range(args.rounds):
        for rate, bucket in ((0.0, idle), (args.rate, loaded)):
            res = measure(rate, args.duration, args.warmup, args.refresh, cores, args.layout)
            bucket.append(res)
            print(
                f"round {r + 1} rate {rate:>5g}/s: UI {res['ui_cpu_percent']:.2f} % of a core, "
                f"server {res['server_cpu_percent']:.1f} %, {res['events']} events, "
                f"{res['finished']} requests folded, {res['refreshes']} refreshes"
            )
    ui_idle = statistics.median(r["ui_cpu_percent"] for r in idle)
    ui_loaded = statistics.median(r["ui_cpu_percent"] for r in loaded)
    print()
    print(f"UI CPU, idle server (reference):  {ui_idle:.2f} % of one core (median)")
    print(
        f"UI CPU, {args.rate:g} requests/s:         {ui_loaded:.2f} % of one core (median); "
        f"min {min(r['ui_cpu_percent'] for r in loaded):.2f}, "
        f"max {max(r['ui_cpu_percent'] for r in loaded):.2f}"
    )
    print(
        f"cost of the events: {ui_loaded - ui_idle:+.2f} points; loaded/idle ratio "
        f"{ui_loaded / ui_idle if ui_idle > 0 else float('inf'):.2f}"
    )
    verdict = "within" if ui_loaded <= BUDGET_PERCENT else "OVER"
    print(f"budget: {BUDGET_PERCENT:g} % of one core at 1 Hz → {verdict} budget")
    return 0 if ui_loaded <= BUDGET_PERCENT else 1


if __name__ == "__main__":
    sys.exit(main())
