"""Are the server's defaults the right ones on this machine?

``edgeserve serve`` chooses the engine's precision and where the vision tower runs from the CPU
it starts on (:mod:`edgeserve.auto_defaults`). This benchmark puts that choice next to every
alternative on the machine it runs on: {bfloat16, float32} × {vLLM's tower in the engine
(``--encoder none``), the exported tower on ONNX Runtime in the workers (``--encoder onnx``)},
each with the worker count the server derives for it. Every server gets the same requests: 12 MP
photographs (``--images``), each a new image, at the model's full image budget (the default
``--max-pixels``), at the same short sweep of Poisson rates.

1. The default server (no flags but ``--port``) starts first; its start-up lines say which
   combination it resolved to (dtype, encoder, workers). A closed-loop probe of
   ``--probe-requests`` at ``--probe-concurrency`` measures what it completes per second.
2. The sweep's rates are ``--fractions`` of that; each point offers ``--point-s`` seconds of
   arrivals and waits for every answer; a server's sweep ends at its first rate over the goal. The default server runs its sweep; then each other
   combination starts with ``--dtype D --encoder E`` and runs the same sweep on the same bodies.

Per combination the report gives the **sustained rate**: the offered rate at which TTFT p99
reaches ``--ttft-slo-s`` (3 s), interpolated between the last point under it and the first over
it (the highest point when all are under, 0 when none is, both flagged), and the **ITL p99** at
the sweep's lowest rate, where no combination should be saturated. The default passes when its
sustained rate is within 10 % of the best and its ITL p99 within 20 % of the best. The CPU's
model name and its flags that decide the choice (avx2, avx512f, avx512_bf16, amx) go with it.
JSON, a printed table and a PNG (TTFT p99 and ITL p99 against rate) go to ``--out``.

    python benchmarks/defaults.py                   # 8 min on a 2-core Zen 4, tiny model
    python benchmarks/defaults.py --short          # a try-out
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve import hardware
from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s
from edgeserve.bench.runner import RunResult, fetch_model_id, run_load
from edgeserve.bench.server_process import ServerProcess
from edgeserve.bench.workload import PreparedRequest, WorkloadConfig, prepare_requests

SHOWN_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
RATE_WITHIN = 0.10  # the default's sustained rate may be this much below the best
ITL_WITHIN = 0.20  # its ITL p99 this much above the best


class Dtype(enum.StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"


class Tower(enum.StrEnum):
    """Where the vision tower runs (the ``--encoder`` values)."""

    ENGINE = "none"  # vLLM's own tower inside the engine
    ONNX = "onnx"  # the exported tower on ONNX Runtime in the preprocessing workers


@dataclass(slots=True, frozen=True)
class Combo:
    dtype: Dtype
    tower: Tower

    @property
    def flags(self) -> list[str]:
        return ["--dtype", self.dtype.value, "--encoder", self.tower.value]

    @property
    def label(self) -> str:
        return f"{self.dtype.value} + {'ONNX encoder' if self.tower is Tower.ONNX else 'engine tower'}"


COMBOS = tuple(Combo(d, t) for d in Dtype for t in Tower)


@dataclass(slots=True)
class Point:
    """One rate of the sweep on one server."""

    offered_rps: float
    sent: int
    ok: int
    achieved_rps: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p99_s: float | None


def started_as(log_text: str) -> tuple[Combo, int]:
    """The combination and worker count a server reports in its start-up lines."""
    dtype = re.search(r"edgeserve serve: dtype (\w+)", log_text)
    encoder = re.search(r"edgeserve serve: encoder (none|onnx)\b", log_text)
    onnx_line = "edgeserve serve: vision encoder:" in log_text  # printed when the workers run it
    workers = re.search(r"ready on \S+ \(mode=\w+, workers=(\d+)", log_text)
    if dtype is None or workers is None:
        raise ValueError("the server's start-up lines name no dtype or no worker count")
    tower = Tower(encoder[1]) if encoder else (Tower.ONNX if onnx_line else Tower.ENGINE)
    return Combo(Dtype(dtype[1]), tower), int(workers[1])


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def point_of(offered_rps: float, run: RunResult) -> Point:
    ok = [r for r in run.results if r.ok]
    span_s = (max(r.start_s + r.e2e_s for r in ok) - min(r.start_s for r in run.results)
              if ok else run.duration_s)
    itl = [x for r in ok for x in r.itl_s]
    return Point(offered_rps=offered_rps, sent=len(run.results), ok=len(ok),
                 achieved_rps=len(ok) / span_s if span_s > 0 else 0.0,
                 ttft_p50_s=pct([r.ttft_s for r in ok], 50),
                 ttft_p99_s=pct([r.ttft_s for r in ok], 99), itl_p99_s=pct(itl, 99))


def passes(p: Point, slo_s: float) -> bool:
    return p.ok == p.sent and p.ttft_p99_s is not None and p.ttft_p99_s <= slo_s


def sustained_rate(points: list[Point], slo_s: float) -> tuple[float, str]:
    """The offered rate where TTFT p99 reaches ``slo_s``, and how it was found: ``interpolated``
    between the last passing and the first failing point, ``at least`` (every point passed) or
    ``below the sweep`` (none did)."""
    pts = sorted(points, key=lambda p: p.offered_rps)
    first_fail = next((k for k, p in enumerate(pts) if not passes(p, slo_s)), None)
    if first_fail is None:
        return pts[-1].offered_rps, "at least"
    if first_fail == 0:
        return 0.0, "below the sweep"
    lo, hi = pts[first_fail - 1], pts[first_fail]
    assert lo.ttft_p99_s is not None
    hi_ttft = hi.ttft_p99_s if hi.ttft_p99_s is not None and hi.ok == hi.sent else math.inf
    if not math.isfinite(hi_ttft) or hi_ttft <= lo.ttft_p99_s:
        return lo.offered_rps, "interpolated"
    frac = (slo_s - lo.ttft_p99_s) / (hi_ttft - lo.ttft_p99_s)
    return lo.offered_rps + frac * (hi.offered_rps - lo.offered_rps), "interpolated"


def judge(rows: dict[str, dict[str, Any]], default_label: str) -> dict[str, Any]:
    """Whether the default's sustained rate is within 10 % of the best and its ITL p99 within
    20 % of the best."""
    best_rate = max(r["sustained_rps"] for r in rows.values())
    itls = [r["itl_p99_ms"] for r in rows.values() if r["itl_p99_ms"] is not None]
    best_itl = min(itls) if itls else None
    d = rows[default_label]
    rate_ok = d["sustained_rps"] >= (1 - RATE_WITHIN) * best_rate
    itl_ok = (d["itl_p99_ms"] is not None and best_itl is not None
              and d["itl_p99_ms"] <= (1 + ITL_WITHIN) * best_itl)
    return {"best_sustained_rps": round(best_rate, 3),
            "best_sustained": max(rows, key=lambda k: rows[k]["sustained_rps"]),
            "best_itl_p99_ms": best_itl,
            "best_itl": min((k for k in rows if rows[k]["itl_p99_ms"] is not None),
                            key=lambda k: rows[k]["itl_p99_ms"], default=None),
            "default_rate_within_10pct": bool(rate_ok),
            "default_itl_within_20pct": bool(itl_ok)}


class Bodies:
    """The requests of each rate of the sweep, built the first time a server needs them (while
    no load runs) and the same for every server; each request has an image of its own."""

    def __init__(self, workload: WorkloadConfig, model: str, counts: list[int]) -> None:
        self.workload, self.model, self.counts = workload, model, counts
        self.built: dict[int, list[PreparedRequest]] = {}

    def of(self, k: int) -> list[PreparedRequest]:
        if k not in self.built:
            self.built[k] = prepare_requests(self.workload, self.counts[k], self.model,
                                             first_number=sum(self.counts[:k]))
        return self.built[k]


async def sweep(url: str, bodies: Bodies, rates: list[float], point_s: float, seed: int,
                slo_s: float) -> list[Point]:
    """The rates in increasing order, up to the first that misses the TTFT goal (the sustained
    rate is then bracketed; a higher rate would only add a backlog to drain)."""
    points = []
    for k, rate in enumerate(rates):
        reqs = await asyncio.to_thread(bodies.of, k)
        offsets = arrival_offsets_s(ArrivalConfig(rate_rps=rate, num_requests=len(reqs),
                                                  seed=seed + k)).tolist()
        run = await run_load(url, reqs, offsets, progress=False, request_timeout_s=300)
        p = point_of(rate, run)
        print(f"    {rate:5.2f} req/s: {p.ok}/{p.sent} ok, TTFT p99 "
              f"{fmt_ms(p.ttft_p99_s)}, ITL p99 {fmt_ms(p.itl_p99_s)}", flush=True)
        points.append(p)
        if not passes(p, slo_s):
            break
        await asyncio.sleep(2.0)  # let the backlog of the point clear
    return points


def fmt_ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.0f} ms"


def start(flags: list[str], out: Path, name: str) -> tuple[ServerProcess, Combo, int, float]:
    t = time.monotonic()
    server = ServerProcess.edgeserve(flags, out / f"server-{name}.log").start().ready(600)
    combo, workers = started_as(server.log_path.read_text(errors="replace"))
    return server, combo, workers, time.monotonic() - t


def row_of(combo: Combo, workers: int, start_s: float, points: list[Point],
           slo_s: float) -> dict[str, Any]:
    rate, how = sustained_rate(points, slo_s)
    low = min(points, key=lambda p: p.offered_rps)
    return {"dtype": combo.dtype.value, "encoder": combo.tower.value, "workers": workers,
            "start_s": round(start_s, 1), "sustained_rps": round(rate, 3), "sustained_how": how,
            "itl_p99_ms": None if low.itl_p99_s is None else round(low.itl_p99_s * 1e3, 1),
            "itl_at_rps": round(low.offered_rps, 3), "points": [asdict(p) for p in points]}


def print_table(rows: dict[str, dict[str, Any]], default_label: str, slo_s: float) -> None:
    print(f"\n{'combination':<28} {'workers':>7} {f'sustained @TTFT p99<={slo_s:g}s':>28} "
          f"{'ITL p99':>9}")
    for label, r in rows.items():
        mark = "  ← default" if label == default_label else ""
        rate = f"{r['sustained_rps']:.2f} req/s ({r['sustained_how']})"
        itl = "—" if r["itl_p99_ms"] is None else f"{r['itl_p99_ms']:.0f} ms"
        print(f"{label:<28} {r['workers']:>7} {rate:>28} {itl:>9}{mark}")


def plot(rows: dict[str, dict[str, Any]], default_label: str, slo_s: float, title: str,
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for label, r in rows.items():
        pts = r["points"]
        style = {"lw": 2.5} if label == default_label else {"lw": 1.2}
        name = f"{label} (default)" if label == default_label else label
        ax.plot([p["offered_rps"] for p in pts],
                [(p["ttft_p99_s"] or math.nan) for p in pts], marker="o", label=name, **style)
        bx.plot([p["offered_rps"] for p in pts],
                [(p["itl_p99_s"] or math.nan) * 1e3 for p in pts], marker="o", label=name,
                **style)
    ax.axhline(slo_s, color="grey", ls="--", lw=0.8)
    ax.set_ylabel("TTFT p99 (s)")
    bx.set_ylabel("ITL p99 (ms)")
    bx.set_yscale("log")
    for a in (ax, bx):
        a.set_xlabel("offered rate (req/s, 12 MP photos)")
        a.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", default="12mp", help="edgeserve bench --images mix (default 12mp)")
    p.add_argument("--output-len", default="32", help="output tokens per request (default 32)")
    p.add_argument("--fractions", default="0.5,0.8,1.1,1.4",
                   help="the sweep's rates as fractions of the default server's probed rate "
                        "(default 0.5,0.8,1.1,1.4)")
    p.add_argument("--point-s", type=float, default=20.0,
                   help="seconds of arrivals per rate (default 20)")
    p.add_argument("--probe-requests", type=int, default=16,
                   help="requests of the closed-loop probe (default 16)")
    p.add_argument("--probe-concurrency", type=int, default=4,
                   help="requests in flight during the probe (default 4)")
    p.add_argument("--ttft-slo-s", type=float, default=3.0, help="TTFT p99 goal (default 3 s)")
    p.add_argument("--seed", type=int, default=7, help="images and arrivals (default 7)")
    p.add_argument("--short", action="store_true",
                   help="a try-out: rates 0.5 and 1.0 of the probe, 10 s each, a 6-request probe")
    p.add_argument("--out", type=Path, default=Path("results/defaults"),
                   help="folder for the report, the PNG and the servers' logs "
                        "(default results/defaults)")
    args = p.parse_args(argv)
    if args.short:
        args.fractions, args.point_s, args.probe_requests = "0.5,1.0", 10.0, 6
    try:
        args.fractions = sorted(float(f) for f in args.fractions.split(","))
    except ValueError:
        p.error(f"--fractions {args.fractions!r}: give comma-separated numbers, e.g. 0.5,0.8,1.1")
    if not args.fractions or args.fractions[0] <= 0:
        p.error("--fractions must be positive")
    if args.point_s <= 0 or args.probe_requests < 2:
        p.error("--point-s must be > 0 and --probe-requests at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    hw = hardware.detect()
    cpu_flags = {f: f in hw.cpu_flags for f in SHOWN_FLAGS}
    cpu = {"model": hw.cpu_model, "cores": hw.cores, "platform": hw.platform.value,
           "flags": cpu_flags}
    print(f"machine: {hw.describe()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    workload = WorkloadConfig(sizes=args.images, output_len=args.output_len, seed=args.seed)
    rows: dict[str, dict[str, Any]] = {}

    server, default, workers, start_s = start([], out, "default")
    default_flags = default.flags
    try:
        model = asyncio.run(fetch_model_id(server.url))
        print(f"default: {default.label}, {workers} worker(s) (started in {start_s:.0f} s); "
              f"probe: {args.probe_requests} requests, {args.probe_concurrency} in flight …",
              flush=True)
        probe = prepare_requests(workload, args.probe_requests, model, first_number=10**6)
        run = asyncio.run(run_load(server.url, probe, [0.0] * len(probe), progress=False,
                                   max_concurrency=args.probe_concurrency))
        capacity = point_of(math.inf, run).achieved_rps
        if capacity <= 0:
            raise RuntimeError("the probe completed no request; see the server log in --out")
        rates = [round(f * capacity, 3) for f in args.fractions]
        counts = [max(2, round(r * args.point_s)) for r in rates]
        print(f"probe: {capacity:.2f} req/s; sweep {', '.join(f'{r:g}' for r in rates)} req/s, "
              f"{args.point_s:g} s each", flush=True)
        bodies = Bodies(workload, model, counts)
        print(f"[{default.label}] (the default)", flush=True)
        points = asyncio.run(sweep(server.url, bodies, rates, args.point_s, args.seed,
                                   args.ttft_slo_s))
        rows[default.label] = row_of(default, workers, start_s, points, args.ttft_slo_s)
    finally:
        server.stop()
    for combo in COMBOS:
        if combo == default:
            continue
        server, started, workers, start_s = start(combo.flags, out, combo.label.replace(" ", ""))
        try:
            if started != combo:
                raise RuntimeError(f"asked for {combo.label}, the server says {started.label}")
            print(f"[{combo.label}] {workers} worker(s), started in {start_s:.0f} s", flush=True)
            points = asyncio.run(sweep(server.url, bodies, rates, args.point_s, args.seed,
                                       args.ttft_slo_s))
            rows[combo.label] = row_of(combo, workers, start_s, points, args.ttft_slo_s)
        finally:
            server.stop()
    rows = {c.label: rows[c.label] for c in COMBOS}
    verdict = judge(rows, default.label)
    print_table(rows, default.label, args.ttft_slo_s)
    print(f"\ndefault ({default.label}): sustained rate within 10 % of the best "
          f"({verdict['best_sustained']}): {verdict['default_rate_within_10pct']}; ITL p99 "
          f"within 20 % of the best ({verdict['best_itl']}): "
          f"{verdict['default_itl_within_20pct']}")
    summary = {"cpu": cpu, "model": model, "images": args.images, "output_len": args.output_len,
               "default": {"label": default.label, "flags": default_flags,
                           "resolved_from": "the server's start-up lines"},
               "probe_rps": round(capacity, 3), "rates_rps": rates, "point_s": args.point_s,
               "ttft_slo_s": args.ttft_slo_s, "combinations": rows, "verdict": verdict,
               "wall_s": round(time.monotonic() - began, 1),
               "loadavg_1m_after": os.getloadavg()[0]}
    (out / "defaults.json").write_text(json.dumps(summary, indent=1))
    flags = ", ".join(f for f, on in cpu_flags.items() if on)
    plot(rows, default.label, args.ttft_slo_s,
         f"edgeserve serve combinations, {args.images} photos — {hw.cpu_model}, {hw.cores} "
         f"cores ({flags})", out / "defaults.png")
    print(f"wrote {out / 'defaults.json'} and {out / 'defaults.png'} "
          f"({summary['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
