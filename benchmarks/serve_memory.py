"""Does the server's memory stay flat under sustained overload?

A server offered more than it can serve either sheds load or holds the backlog somewhere. vLLM
holds every request it is handed — with its pixel arrays (about 24 MB of float32 for a
1280-token image) — until the scheduler takes it, so the place the backlog waits decides the
memory. This benchmark starts ``edgeserve serve --mode split`` twice on the same workload:

* ``bounded``: the default engine hand-off (``--max-engine-queue``, 2 × max_num_seqs slots held
  until the first token; the backlog waits in front of preprocessing with its encoded bytes only,
  429 once ``--max-pending`` wait);
* ``unbounded``: ``--max-engine-queue`` set out of reach — every admitted request goes to vLLM at
  once, as before this bound existed (``--max-inflight`` still caps admissions);
* ``bounded-nocache`` (ask for it with ``--arms``): ``bounded`` with vLLM's multimodal processor
  cache off. That cache (an LRU of processed images kept in the EngineCore, 4 GiB by default)
  grows with every new image until it is full — bounded, but not flat while it fills.

Each arm is offered ``--rate`` req/s of 1 MP photographs (1280 image tokens each at the tiny
model's budget, so the engine is the bottleneck and a backlog builds) for ``--duration`` seconds
by ``edgeserve bench run``, while the resident memory (RSS) of every process of the server's tree
(frontend, preprocessing workers, vLLM's EngineCore and model runner) is sampled each second. The
report gives, per arm, the total RSS after the warm-up and at the end, its growth per minute
(least-squares slope over the load), the peak, and the requests completed and rejected; and the
ratio of the two arms' growth. JSON and a PNG of RSS over time go to ``--out``.

    .venv/bin/python benchmarks/serve_memory.py --rate 6 --duration 120
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from edgeserve.net import free_port

ROOT = Path(__file__).resolve().parent.parent
ARMS = {
    "bounded": [],
    "unbounded": ["--max-engine-queue", "1000000"],
    # vLLM's multimodal processor cache (an LRU of processed inputs mirrored in the frontend and
    # the EngineCore, 4 GiB by default) fills with every new image: off, nothing else may grow
    "bounded-nocache": ["--engine-arg", "mm_processor_cache_gb=0"],
}


def tree_rss(pid: int, label: Callable[[psutil.Process], str] | None = None) -> dict[str, int]:
    """RSS per process of the tree rooted at ``pid``, keyed ``label(process):pid`` (default: the
    process name)."""
    out: dict[str, int] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            out[f"{label(p) if label else p.name()}:{p.pid}"] = p.memory_info().rss
        except psutil.Error:
            continue
    return out


def run_arm(name: str, extra: list[str], args: argparse.Namespace, out: Path) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(out / f"server-{name}.log", "wb")  # noqa: SIM115 — closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "edgeserve", "serve", "--mode", "split", "--port", str(port),
         *extra], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server {name} exited; see {log.name}")
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server {name} not ready") from None
                time.sleep(1)
        samples: list[tuple[float, dict[str, int]]] = []
        stop = threading.Event()
        t0 = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.monotonic() - t0, tree_rss(server.pid)))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = out / f"run-{name}.json"
        bench = subprocess.Popen(
            [sys.executable, "-m", "edgeserve", "bench", "run", "--url", url, "--images",
             args.images, "--request-rate", str(args.rate), "--duration", str(args.duration),
             "--output-len", "16", "--no-progress", "--request-timeout", str(args.duration * 3),
             "--save-result", str(result), "--seed", "7"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        # the client builds its requests first; the load starts when it starts sending
        load_started = None
        while bench.poll() is None:
            if load_started is None and _inflight(url) > 0:
                load_started = time.monotonic() - t0
            if load_started is not None and time.monotonic() - t0 > load_started + args.duration:
                break
            time.sleep(0.5)
        load_ended = time.monotonic() - t0
        if bench.poll() is None:  # the backlog would take long to drain: stop here
            bench.send_signal(signal.SIGINT)
            try:
                bench.wait(30)
            except subprocess.TimeoutExpired:
                bench.kill()
        stop.set()
        sampler.join()
        counts = _outcomes(url)
        return {"samples": samples, "load_started_s": load_started, "load_ended_s": load_ended,
                "outcomes": counts}
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def _inflight(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return int(json.loads(r.read())["inflight"])
    except (urllib.error.URLError, ConnectionError, KeyError, ValueError):
        return 0


def _outcomes(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("edgeserve_requests_total{"):
                label = line.split('outcome="')[1].split('"')[0]
                out[label] = float(line.rsplit(" ", 1)[1])
    return out


def summarize(arm: dict, warmup_s: float) -> dict:
    start = (arm["load_started_s"] or 0.0) + warmup_s
    pts = [(t, sum(r.values())) for t, r in arm["samples"] if start <= t <= arm["load_ended_s"]]
    if len(pts) < 3:
        raise RuntimeError("too few samples under load; lengthen --duration")
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mr = sum(r for _, r in pts) / n
    slope = sum((t - mt) * (r - mr) for t, r in pts) / sum((t - mt) ** 2 for t, _ in pts)
    return {"rss_after_warmup_mb": pts[0][1] / 2**20, "rss_end_mb": pts[-1][1] / 2**20,
            "rss_peak_mb": max(r for _, r in pts) / 2**20,
            "growth_mb_per_min": slope * 60 / 2**20, "outcomes": arm["outcomes"]}


def plot(arms: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for name, arm in arms.items():
        t0 = arm["load_started_s"] or 0.0
        ax.plot([t - t0 for t, _ in arm["samples"]],
                [sum(r.values()) / 2**30 for _, r in arm["samples"]], label=name)
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("seconds since the load started")
    ax.set_ylabel("server RSS, all processes (GiB)")
    ax.set_title("edgeserve serve under sustained overload")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=6.0, help="offered req/s (default 6)")
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load per arm")
    p.add_argument("--images", default="1mp", help="edgeserve bench --images mix (default 1mp)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of load not in the fit")
    p.add_argument("--arms", default="bounded,unbounded")
    p.add_argument("--out", type=Path, default=Path("results/serve_memory"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    arms = {}
    for name in args.arms.split(","):
        print(f"[{name}] {args.rate:g} req/s of {args.images} for {args.duration:g} s …", flush=True)
        arms[name] = run_arm(name, ARMS[name], args, args.out)
    summary = {name: summarize(arm, args.warmup) for name, arm in arms.items()}
    print(f"\n{'arm':<10} {'RSS after warm-up':>18} {'RSS end':>9} {'peak':>9} "
          f"{'growth MB/min':>14}  outcomes")
    for name, s in summary.items():
        print(f"{name:<10} {s['rss_after_warmup_mb']:>15.0f} MB {s['rss_end_mb']:>6.0f} MB "
              f"{s['rss_peak_mb']:>6.0f} MB {s['growth_mb_per_min']:>14.1f}  {s['outcomes']}")
    if "bounded" in summary and "unbounded" in summary:
        b, u = summary["bounded"], summary["unbounded"]
        print(f"\ngrowth, unbounded / bounded: {u['growth_mb_per_min']:.1f} / "
              f"{b['growth_mb_per_min']:.1f} MB/min; peak {u['rss_peak_mb']:.0f} vs "
              f"{b['rss_peak_mb']:.0f} MB")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    (args.out / "serve_memory.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
         "arms": arms}, indent=1))
    plot(arms, args.out / "serve_memory.png")
    print(f"wrote {args.out / 'serve_memory.json'} and {args.out / 'serve_memory.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
