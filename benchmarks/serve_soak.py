"""Does the default server stay flat for half an hour at a rate it can sustain?

Starts ``edgeserve serve`` with no flags but ``--port`` (the configuration a user gets), finds the
rate it sustains (a closed-loop probe of ``--probe-s`` seconds at ``--probe-concurrency``; or take
``--sustainable-rate``), then offers ``--load-fraction`` (0.8) of it as Poisson arrivals for
``--duration`` seconds, every request with an image of its own (``--images``, photographs, so the
multimodal cache sees only new images and fills to its cap). Request bodies are built in a thread
a few seconds ahead of their send time, so the client never holds more than a few seconds of work.

Every second the resident memory (RSS) of each process of the server's tree (frontend,
preprocessing workers, vLLM's EngineCore and model worker) and the bytes and files in
``/dev/shm`` are sampled. Samples and per-request results stream to JSON Lines in ``--out`` as
they happen (nothing grows in this process with the duration). The report gives

* the least-squares RSS slope over the load after ``--warmup-s`` (goal: < 1 MB/min), in total
  and per process role;
* errors (non-2xx, transport failures) and 429s;
* TTFT p50/p99 in the first and the last 5 minutes of the load;
* ``/dev/shm`` at the start and end.

A PNG of RSS and /dev/shm over time goes next to the JSON.

    .venv/bin/python benchmarks/serve_soak.py --duration 1800 --out results/serve_soak
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_memory import tree_rss

from edgeserve.bench.client import RequestResult, send_chat
from edgeserve.bench.runner import chat_url, fetch_model_id
from edgeserve.bench.workload import WorkloadConfig, prepare_requests
from edgeserve.net import free_port

WINDOW_S = 300.0  # the first and last windows compared for TTFT


def role(name: str, cmdline: list[str], is_root: bool) -> str:
    if is_root:
        return "frontend"
    text = " ".join(cmdline)
    if "resource_tracker" in text:
        return "resource_tracker"
    if "EngineCore" in name or "EngineCore" in text:
        return "engine_core"
    if name.startswith("VLLM") or "Worker" in name:
        return "model_worker"
    if "multiprocessing" in text or "spawn" in text:
        return "preproc_worker"
    return name


def sample_tree(pid: int) -> dict[str, int]:
    """RSS per process of the server's tree, keyed ``role:pid``."""
    return tree_rss(pid, lambda p: role(p.name(), p.cmdline(), p.pid == pid))


def shm_usage() -> tuple[int, int]:
    total = files = 0
    for entry in os.scandir("/dev/shm"):
        try:
            total += entry.stat().st_blocks * 512
            files += 1
        except OSError:
            continue
    return total, files


class Sampler(threading.Thread):
    """Writes one JSON line per second: time since start, RSS per process, /dev/shm."""

    def __init__(self, pid: int, path: Path, t0: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.path, self.t0 = pid, path, t0
        self.stop = threading.Event()

    def run(self) -> None:
        with self.path.open("w") as f:
            while not self.stop.is_set():
                shm_bytes, shm_files = shm_usage()
                f.write(json.dumps({"t_s": round(time.monotonic() - self.t0, 3),
                                    "rss": sample_tree(self.pid), "shm_bytes": shm_bytes,
                                    "shm_files": shm_files}) + "\n")
                f.flush()
                self.stop.wait(1.0)


def start_server(out: Path, extra: list[str] | None = None, name: str = "server",
                 prefix: list[str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``edgeserve serve`` with defaults (plus ``extra`` flags), ready; logs under ``out``.
    ``prefix`` goes before the command (e.g. ``taskset -c 0,1``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (out / f"{name}.log").open("wb")
    server = subprocess.Popen(
        [*(prefix or []), sys.executable, "-m", "edgeserve", "serve", "--port", str(port),
         "--engine-log", str(out / f"{name}-engine.log"), *(extra or [])],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"server exited; see {log.name}")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return server, url
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise RuntimeError("server not ready in 300 s") from None
            time.sleep(1)


def stop_server(server: subprocess.Popen[bytes]) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


class BodyMaker(threading.Thread):
    """Builds request bodies (one new image each) ahead of time into a small queue."""

    def __init__(self, workload: WorkloadConfig, model: str, ahead: int) -> None:
        super().__init__(daemon=True)
        self.workload, self.model = workload, model
        self.q: queue.Queue[bytes] = queue.Queue(maxsize=ahead)
        self.stop = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            (req,) = prepare_requests(self.workload, 1, self.model, first_number=number)
            number += 1
            while not self.stop.is_set():
                try:
                    self.q.put(req.body, timeout=0.5)
                    break
                except queue.Full:
                    continue


async def drive(url: str, *, rate_rps: float | None, concurrency: int | None, duration_s: float,
                workload: WorkloadConfig, results_path: Path | None, t0: float,
                seed: int = 7) -> list[RequestResult]:
    """Open loop at ``rate_rps`` (Poisson) or closed loop at ``concurrency``, for ``duration_s``.
    Each finished request is written to ``results_path`` (JSON Lines) and not kept, unless there
    is no path (the short probe)."""
    import aiohttp

    model = await fetch_model_id(url)
    maker = BodyMaker(workload, model, ahead=max(8, int((rate_rps or 4) * 5)))
    maker.start()
    while maker.q.qsize() < min(8, maker.q.maxsize):  # a small head start
        await asyncio.sleep(0.1)
    kept: list[RequestResult] = []
    sink = results_path.open("w") if results_path else None
    rng = np.random.default_rng(seed)
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    tasks: set[asyncio.Task[None]] = set()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        chat = chat_url(url)

        async def one(i: int, body: bytes) -> None:
            r = RequestResult(index=i)
            if sem is not None:
                async with sem:
                    await send_chat(session, chat, body, r)
            else:
                await send_chat(session, chat, body, r)
            if sink is not None:
                sink.write(json.dumps({"i": i, "t_s": round(r.start_s - t0, 4), "ok": r.ok,
                                       "status": r.http_status, "error": r.error[:120],
                                       "ttft_s": round(r.ttft_s, 5),
                                       "e2e_s": round(r.e2e_s, 5)}) + "\n")
            else:
                kept.append(r)

        start = time.perf_counter()
        next_s = 0.0
        i = 0
        while next_s < duration_s:
            if sem is not None:  # closed loop: one waiting task per free slot
                while len(tasks) >= concurrency * 2:  # type: ignore[operator]
                    await asyncio.sleep(0.01)
            else:
                delay = start + next_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            body = await asyncio.to_thread(maker.q.get)
            t = asyncio.create_task(one(i, body))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            i += 1
            if rate_rps:
                next_s += float(rng.exponential(1.0 / rate_rps))
            else:
                next_s = time.perf_counter() - start
        maker.stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=120)
    if sink is not None:
        sink.close()
    return kept


def slope_mb_per_min(ts: list[float], ys: list[float]) -> float:
    if len(ts) < 3:
        return float("nan")
    return float(np.polyfit(np.asarray(ts), np.asarray(ys), 1)[0] * 60 / 2**20)


def report(out: Path, load_start_s: float, load_end_s: float, warmup_s: float) -> dict[str, Any]:
    ts: list[float] = []
    total: list[float] = []
    by_role: dict[str, list[tuple[float, float]]] = {}
    shm_first = shm_last = None
    for line in (out / "samples.jsonl").open():
        s = json.loads(line)
        if shm_first is None:
            shm_first = (s["shm_bytes"], s["shm_files"])
        shm_last = (s["shm_bytes"], s["shm_files"])
        if not load_start_s + warmup_s <= s["t_s"] <= load_end_s:
            continue
        ts.append(s["t_s"])
        total.append(sum(s["rss"].values()))
        roles: dict[str, float] = {}
        for key, rss in s["rss"].items():
            r = key.split(":")[0]
            roles[r] = roles.get(r, 0) + rss
        for r, v in roles.items():
            by_role.setdefault(r, []).append((s["t_s"], v))
    ok_first: list[float] = []
    ok_last: list[float] = []
    n = errors = rejected = 0
    for line in (out / "requests.jsonl").open():
        r = json.loads(line)
        n += 1
        if not r["ok"]:
            errors += 1
            rejected += r["status"] == 429
            continue
        if r["t_s"] < load_start_s + WINDOW_S:
            ok_first.append(r["ttft_s"])
        elif r["t_s"] >= load_end_s - WINDOW_S:
            ok_last.append(r["ttft_s"])

    def pct(xs: list[float], q: float) -> float | None:
        return round(float(np.percentile(xs, q)) * 1e3, 1) if xs else None

    return {
        "requests": n, "errors": errors, "rejected_429": rejected,
        "rss_slope_mb_per_min": round(slope_mb_per_min(ts, total), 3),
        "rss_slope_by_role_mb_per_min": {
            r: round(slope_mb_per_min([t for t, _ in v], [y for _, y in v]), 3)
            for r, v in sorted(by_role.items())},
        "rss_after_warmup_mb": round(total[0] / 2**20, 1) if total else None,
        "rss_end_mb": round(total[-1] / 2**20, 1) if total else None,
        "rss_peak_mb": round(max(total) / 2**20, 1) if total else None,
        "ttft_ms_first_5min": {"p50": pct(ok_first, 50), "p99": pct(ok_first, 99),
                               "n": len(ok_first)},
        "ttft_ms_last_5min": {"p50": pct(ok_last, 50), "p99": pct(ok_last, 99),
                              "n": len(ok_last)},
        "shm_start": shm_first, "shm_end": shm_last,
    }


def plot(out: Path, load_start_s: float, warmup_s: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, rss, shm = [], [], []
    for line in (out / "samples.jsonl").open():
        s = json.loads(line)
        t.append((s["t_s"] - load_start_s) / 60)
        rss.append(sum(s["rss"].values()) / 2**30)
        shm.append(s["shm_bytes"] / 2**20)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, rss, label="server RSS, all processes")
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.axvline(warmup_s / 60, color="grey", lw=0.8, ls="--", label="end of warm-up")
    ax.set_xlabel("minutes since the load started")
    ax.set_ylabel("GiB")
    ax2 = ax.twinx()
    ax2.plot(t, shm, color="tab:orange", lw=0.8, label="/dev/shm")
    ax2.set_ylabel("/dev/shm (MiB)")
    ax.set_title("edgeserve serve (defaults) under sustained load")
    fig.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "serve_soak.png", dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=1800.0, help="seconds of load (default 1800)")
    p.add_argument("--warmup-s", type=float, default=300.0,
                   help="seconds of load left out of the RSS fit (default 300)")
    p.add_argument("--images", default="1mp", help="edgeserve bench --images mix (default 1mp)")
    p.add_argument("--output-len", default="16")
    p.add_argument("--sustainable-rate", type=float, help="req/s; default: measured by a probe")
    p.add_argument("--probe-s", type=float, default=60.0)
    p.add_argument("--probe-concurrency", type=int, default=8)
    p.add_argument("--load-fraction", type=float, default=0.8)
    p.add_argument("--out", type=Path, default=Path("results/serve_soak"))
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    workload = WorkloadConfig(sizes=args.images, output_len=args.output_len)
    server, url = start_server(out)
    t0 = time.monotonic()
    sampler = Sampler(server.pid, out / "samples.jsonl", t0)
    sampler.start()
    try:
        rate = args.sustainable_rate
        if rate is None:
            print(f"probe: {args.probe_concurrency} in flight for {args.probe_s:g} s …", flush=True)
            probe = asyncio.run(drive(url, rate_rps=None, concurrency=args.probe_concurrency,
                                      duration_s=args.probe_s, workload=workload,
                                      results_path=None, t0=time.perf_counter()))
            done = [r for r in probe if r.ok]
            span = max(r.start_s + r.e2e_s for r in done) - min(r.start_s for r in done)
            rate = len(done) / span
            print(f"probe: {len(done)} requests in {span:.1f} s → sustainable {rate:.2f} req/s")
        offered = args.load_fraction * rate
        print(f"soak: {offered:.2f} req/s ({args.load_fraction:g} × {rate:.2f}) of {args.images} "
              f"for {args.duration:g} s …", flush=True)
        load_start = time.monotonic() - t0
        asyncio.run(drive(url, rate_rps=offered, concurrency=None, duration_s=args.duration,
                          workload=workload, results_path=out / "requests.jsonl",
                          t0=time.perf_counter() - load_start))
        load_end = time.monotonic() - t0
    finally:
        sampler.stop.set()
        sampler.join()
        stop_server(server)
    summary = report(out, load_start, load_end, args.warmup_s)
    summary |= {"sustainable_rps": round(rate, 3), "offered_rps": round(offered, 3),
                "images": args.images, "duration_s": args.duration, "warmup_s": args.warmup_s,
                "loadavg_1m_after": os.getloadavg()[0]}
    (out / "serve_soak.json").write_text(json.dumps(summary, indent=1))
    plot(out, load_start, args.warmup_s)
    print(json.dumps(summary, indent=1))
    print(f"wrote {out / 'serve_soak.json'} and {out / 'serve_soak.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
