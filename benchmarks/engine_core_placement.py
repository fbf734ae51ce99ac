"""Where vLLM's EngineCore runs: on its model worker's cores (edgeserve's default) vs wherever
vLLM leaves it (``--engine-core-placement any``), in one run, interleaved.

Each round starts a fresh default ``edgeserve serve --trace`` (the ``any`` rounds with that one
flag more), warms it with a few requests, offers it Poisson arrivals of ``--images`` photos at
``--rate`` for ``--duration`` s (``edgeserve bench run``, a fixed seed: every round the same
schedule), and stops it. From each trace it reports, for requests after the first 8 s:

* the preprocessing job (decode → normalize end) of jobs that overlapped no engine step vs
  jobs that spent over 90 % of their time beside a step — what the EngineCore's spin-wait costs
  the worker;
* the EngineCore's and the model worker's CPU use (the trace's 1 s samples, % of one core);
* the median engine step with an image in it, TTFT and E2E p50/p99, throughput;

then the with-worker / any ratios of the medians over rounds. Rounds alternate (any, with-worker,
any, …) so that drift on a shared machine hits both alike; the 1-minute load average is printed
at each round's start.

    .venv/bin/python benchmarks/engine_core_placement.py --rounds 2 --out results/engine_core
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_soak import start_server, stop_server

PLACEMENTS = ("any", "with-worker")


def quantile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def analyse(trace: Path, skip_s: float = 8.0) -> dict[str, float]:
    recs = [json.loads(line) for line in trace.open()]
    steps = sorted((r["t_s"] - r["duration_s"], r["t_s"], r.get("encoder_tokens", 0))
                   for r in recs if r.get("type") == "step")
    starts = [s for s, _, _ in steps]

    def beside_step(a: float, b: float) -> float:
        i, total = max(0, bisect.bisect_left(starts, a) - 1), 0.0
        while i < len(steps) and steps[i][0] < b:
            total += max(0.0, min(b, steps[i][1]) - max(a, steps[i][0]))
            i += 1
        return total / (b - a) if b > a else 0.0

    reqs = [r for r in recs if r.get("type") == "request"]
    t0 = min(r["arrived_s"] for r in reqs) + skip_s
    done = [r for r in reqs if r.get("first_token_s") and r["arrived_s"] > t0]
    jobs = [(beside_step(r["preproc_start_s"], r["normalize_end_s"]),
             r["normalize_end_s"] - r["preproc_start_s"]) for r in done if r.get("normalize_end_s")]
    samples = [r for r in recs if r.get("type") == "sample" and r["t_s"] > t0]
    cpu = {role: statistics.mean(s["process_cpu"].get(role, 0.0) for s in samples)
           for role in ("engine", "engine_worker", "worker0", "frontend")}
    span = max(r["finished_s"] for r in done) - min(r["arrived_s"] for r in done)
    return {
        "requests": len(done),
        "job_alone_ms": 1000 * statistics.median([d for f, d in jobs if f < 0.1]),
        "job_beside_step_ms": 1000 * statistics.median([d for f, d in jobs if f > 0.9]),
        "engine_core_cpu_pct": cpu["engine"], "model_worker_cpu_pct": cpu["engine_worker"],
        "preproc_worker_cpu_pct": cpu["worker0"], "frontend_cpu_pct": cpu["frontend"],
        "image_step_ms": 1000 * statistics.median([e - s for s, e, enc in steps if enc]),
        "ttft_p50_ms": 1000 * quantile([r["first_token_s"] - r["arrived_s"] for r in done], .5),
        "ttft_p99_ms": 1000 * quantile([r["first_token_s"] - r["arrived_s"] for r in done], .99),
        "e2e_p50_ms": 1000 * quantile([r["finished_s"] - r["arrived_s"] for r in done], .5),
        "e2e_p99_ms": 1000 * quantile([r["finished_s"] - r["arrived_s"] for r in done], .99),
        "throughput_rps": len(done) / span,
    }


def bench(url: str, images: str, args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "edgeserve", "bench", "run", "--url", url,
                    "--images", images, "--output-len", "16", "--no-progress", *args],
                   check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds per placement")
    p.add_argument("--rate", type=float, default=2.0, help="offered req/s")
    p.add_argument("--duration", type=float, default=45.0, help="seconds of arrivals per round")
    p.add_argument("--images", default="12mp", help="edgeserve bench run's --images")
    p.add_argument("--out", type=Path, default=Path("results/engine_core_placement"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in PLACEMENTS}
    for i in range(a.rounds):
        for placement in PLACEMENTS:
            trace = a.out / f"{i}-{placement}.jsonl"
            trace.unlink(missing_ok=True)
            load = os.getloadavg()[0]
            server, url = start_server(a.out, ["--trace", str(trace),
                                               "--engine-core-placement", placement],
                                       name=f"{i}-{placement}")
            try:
                bench(url, a.images, ["--num-prompts", "6", "--max-concurrency", "1"])
                bench(url, a.images, ["--request-rate", str(a.rate), "--duration",
                                      str(a.duration), "--seed", "11"])
            finally:
                stop_server(server)
            row = analyse(trace) | {"load_1m": load}
            rows[placement].append(row)
            print(f"round {i} {placement:11s} load {load:.2f}  " + "  ".join(
                f"{k} {v:.1f}" for k, v in row.items() if k != "load_1m"), flush=True)
    med: dict[str, dict[str, float]] = {
        k: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for k, rs in rows.items()}
    print("\nmedian over rounds      any     with-worker   with-worker/any")
    for m in med["any"]:
        base = med["any"][m]
        ratio = med["with-worker"][m] / base if base else float("nan")
        print(f"{m:24s} {base:9.1f} {med['with-worker'][m]:12.1f} {ratio:12.2f}x")
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(a).items()},
                              "rounds": rows, "median": med}
    (a.out / "engine_core_placement.json").write_text(json.dumps(result, indent=1))
    print(f"saved {a.out / 'engine_core_placement.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
