"""vLLM's engine processes waiting by ``sched_yield`` spins against short sleeps (``--engine-wait``).

Two scenes, each served once with ``--engine-wait yield`` (vLLM's own spin) and once with
``--engine-wait sleep`` (edgeserve's default on vLLM's CPU build, :mod:`edgeserve.engine_wait`),
one after the other, the same seeded arrivals for both:

* **two servers** on this host at once (as ``benchmarks/gateway.py`` runs a device and a cloud):
  both tiny-model servers with one worker and ``--max-num-seqs 4``, server A offered Poisson
  arrivals at ``--rate-a`` of 640×480, 1280×720 and 320×240 PNGs, server B at ``--rate-b`` of
  1280×720 PNGs, both for ``--duration`` seconds, 16 streamed tokens each. vLLM's CPU build binds
  both model workers to the same core.
* **one server** (the default server, no flags but ``--engine-wait``) offered ``--rate-one`` of
  the same mix: what the sleeps cost where nothing else shares the core.

Per run: TTFT p50/p99/max, requests whose TTFT passed 3 s, the engine steps longer than 1 s in
the server's trace (a tiny-model step takes milliseconds), and the EngineCore's and the model
worker's CPU seconds per request (the trace's per-process samples). Ratios sleep / yield are
printed; JSON and a plot go to ``--out``.

    python benchmarks/engine_wait.py                 # about 14 min on a 2-core host
    python benchmarks/engine_wait.py --duration 30   # shorter
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from edgeserve.bench.server_process import ServerProcess
from models.tiny_qwen2_vl import DEFAULT_DIR, build

MIX = [(640, 480), (1280, 720), (320, 240)]
WAITS = ("yield", "sleep")
SLOW_STEP_S = 1.0
SLOW_TTFT_S = 3.0


def png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


IMAGES = {size: png(*size) for size in MIX}


def ask(url: str, i: int, size: tuple[int, int]) -> float:
    """One streamed request; its TTFT in seconds."""
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": f"What is in picture {i}?"},
        {"type": "image_url", "image_url": {"url": IMAGES[size]}}]}],
        "max_tokens": 16, "stream": True}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = float("nan")
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if ttft != ttft and line.startswith(b"data:"):
                ttft = time.monotonic() - t0
    return ttft


def drive(url: str, rate: float, sizes: list[tuple[int, int]], seed: int, duration_s: float,
          out: list[float]) -> None:
    """Poisson arrivals at ``rate`` for ``duration_s``, each request on its own thread."""
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < duration_s:
        arrivals.append((t, rng.choice(sizes)))
    t0 = time.monotonic()

    def one(i: int, at: float, size: tuple[int, int]) -> None:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        out.append(ask(url, i, size))

    threads = [threading.Thread(target=one, args=(i, at, size))
               for i, (at, size) in enumerate(arrivals)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def trace_figures(path: Path, requests: int) -> dict[str, Any]:
    """Slow steps and the engine processes' CPU seconds per request, from a server's trace."""
    slow, cpu = [], {"engine": 0.0, "engine_worker": 0.0}
    last_t = None
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "step" and rec["duration_s"] > SLOW_STEP_S:
            slow.append(round(rec["duration_s"], 2))
        elif rec.get("type") == "sample":
            dt = 1.0 if last_t is None else rec["t_s"] - last_t
            last_t = rec["t_s"]
            for k in cpu:
                cpu[k] += rec.get("process_cpu", {}).get(k, 0.0) / 100.0 * dt
    return {"slow_steps_s": slow,
            "engine_core_cpu_ms_per_request": 1000 * cpu["engine"] / max(1, requests),
            "model_worker_cpu_ms_per_request": 1000 * cpu["engine_worker"] / max(1, requests)}


def summary(ttfts: list[float]) -> dict[str, float]:
    a = np.array([x for x in ttfts if x == x])
    return {"requests": len(ttfts), "ok": int(a.size), "ttft_p50_s": float(np.percentile(a, 50)),
            "ttft_p99_s": float(np.percentile(a, 99)), "ttft_max_s": float(a.max()),
            "over_3s": int((a > SLOW_TTFT_S).sum())}


def serve(name: str, wait: str, out: Path, extra: list[str]) -> ServerProcess:
    return ServerProcess.edgeserve(["--engine-wait", wait, "--trace", str(out / f"{name}.jsonl"),
                                    *extra], out / f"{name}.log").start().ready()


def run_two(wait: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    model = str(build(DEFAULT_DIR))
    flags = ["--model", model, "--workers", "1", "--max-model-len", "4096", "--max-num-seqs", "4"]
    servers = []
    try:
        for name in ("a", "b"):  # one at a time: they share the CPU
            servers.append(serve(f"two-{wait}-{name}", wait, out, flags))
        ttfts: dict[str, list[float]] = {"a": [], "b": []}
        load = [threading.Thread(target=drive, args=(servers[0].url, args.rate_a, MIX, 1,
                                                     args.duration, ttfts["a"])),
                threading.Thread(target=drive, args=(servers[1].url, args.rate_b, [(1280, 720)],
                                                     2, args.duration, ttfts["b"]))]
        for th in load:
            th.start()
        for th in load:
            th.join()
    finally:
        for s in servers:
            s.stop()
    return {name: {**summary(t), **trace_figures(out / f"two-{wait}-{name}.jsonl", len(t))}
            for name, t in ttfts.items()}


def run_one(wait: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    server = serve(f"one-{wait}", wait, out, [])
    try:
        ttfts: list[float] = []
        drive(server.url, args.rate_one, MIX, 3, args.duration, ttfts)
    finally:
        server.stop()
    return {**summary(ttfts), **trace_figures(out / f"one-{wait}.jsonl", len(ttfts))}


def row(label: str, r: dict[str, Any]) -> str:
    return (f"{label:<22} {r['ok']:>3}/{r['requests']:<3} {r['ttft_p50_s']*1000:8.0f} "
            f"{r['ttft_p99_s']*1000:8.0f} {r['ttft_max_s']*1000:8.0f} {r['over_3s']:>5} "
            f"{len(r['slow_steps_s']):>6} {max(r['slow_steps_s'], default=0):>7.1f} "
            f"{r['engine_core_cpu_ms_per_request']:>8.1f} {r['model_worker_cpu_ms_per_request']:>8.1f}")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, p99, mx = [], [], []
    for wait in WAITS:
        runs = []
        if results["two"]:
            runs += [("A, two servers", results["two"][wait]["a"]),
                     ("B, two servers", results["two"][wait]["b"])]
        if results["one"]:
            runs.append(("one server", results["one"][wait]))
        for key, r in runs:
            labels.append(f"{key}\n{wait}")
            p99.append(r["ttft_p99_s"])
            mx.append(r["ttft_max_s"])
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, p99, 0.4, label="TTFT p99")
    ax.bar(x + 0.2, mx, 0.4, label="TTFT max")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title("vLLM's engine processes waiting by sched_yield spins or 50 us sleeps")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per run")
    ap.add_argument("--rate-a", type=float, default=2.0, help="req/s to server A (two servers)")
    ap.add_argument("--rate-b", type=float, default=1.0, help="req/s to server B (two servers)")
    ap.add_argument("--rate-one", type=float, default=2.0, help="req/s to the lone server")
    ap.add_argument("--scenes", default="two,one",
                    help="which scenes to run: two (servers at once), one (server alone)")
    ap.add_argument("--out", type=Path, default=Path("results/engine_wait"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; kernel {os.uname().release}",
          flush=True)
    results: dict[str, Any] = {"two": {}, "one": {}, "kernel": os.uname().release,
                               "duration_s": args.duration, "rates": vars(args) | {"out": None}}
    t0 = time.monotonic()
    scenes = args.scenes.split(",")
    for scene, run in (("two", run_two), ("one", run_one)):
        if scene in scenes:
            for wait in WAITS:
                print(f"{scene} server{'s' if scene == 'two' else ''}, --engine-wait {wait} …",
                      flush=True)
                results[scene][wait] = run(wait, args, args.out)
    print(f"\n{'run':<22} {'ok':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>3 s':>5} "
          f"{'steps>1s':>6} {'longest':>7} {'core ms':>8} {'wkr ms':>8}")
    for wait in results["two"]:
        for name in ("a", "b"):
            print(row(f"two, {name}, {wait}", results["two"][wait][name]))
    for wait in results["one"]:
        print(row(f"one, {wait}", results["one"][wait]))
    print()
    if results["one"]:
        y, s = results["one"]["yield"], results["one"]["sleep"]
        print(f"one server, sleep / yield: TTFT p50 {s['ttft_p50_s'] / y['ttft_p50_s']:.2f}×, "
              f"p99 {s['ttft_p99_s'] / y['ttft_p99_s']:.2f}×")
    for name in ("a", "b") if results["two"] else ():
        y, s = results["two"]["yield"][name], results["two"]["sleep"][name]
        print(f"two servers, {name}, sleep / yield: TTFT p99 "
              f"{s['ttft_p99_s'] / y['ttft_p99_s']:.2f}×, max {s['ttft_max_s'] / y['ttft_max_s']:.2f}×")
    results["load_average_after"] = os.getloadavg()[0]
    results["wall_s"] = time.monotonic() - t0
    (args.out / "engine_wait.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "engine_wait.png")
    print(f"wrote {args.out / 'engine_wait.json'} and {args.out / 'engine_wait.png'} "
          f"({results['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
