"""The serving lessons this project grew from, measured here and reproduced in the simulator.

The seed document measured LLM serving before turning to multimodal and edge: the same model
sustains far more *total* tokens per second on prefix-repetition traffic than on chat traffic
with the same TTFT and ITL (reuse, not faster compute); 4-bit weights free memory for KV cache
and raise concurrency, cutting ITL much more than TTFT; and more GPUs are not always faster —
replicas often beat tensor parallelism, and the interconnect decides. This script shows each:

**Part A — the real server on this machine.** Starts the default ``edgeserve serve`` on the tiny
model, warms it up, then runs the chat-like dataset and the prefix-repetition dataset
(``edgeserve bench``'s ``chat`` and ``prefix-repetition``, default lengths) at the same Poisson
rate, alternately (chat, prefix, chat, prefix, …) for ``--rounds`` rounds. It prints request,
output and total token throughput, total/output, TTFT and ITL p50/p99 and the prefix-cache hit
rate side by side, and the prefix/chat ratio of each (median of the per-round ratios, min–max).
The tiny model's KV cache and 2 shared cores are not a GPU server: the *direction* is the point.

**Part B — the simulator** (``sim/experiments/replicas_tp.py``, roofline cloud replicas):

1. prefix repetition vs chat on one A100 at the same rate, prefix caching on and off;
2. bf16 vs 4-bit weights on an L4 (24 GB): weights, KV tokens, concurrency limit, TTFT, TPOT;
3. replicas vs TP on the 4×L40S PCIe box and the 8×A100 NVLink box across rates: which layout
   meets the SLO with the lowest TPOT p99 at each rate (the crossover).

    .venv/bin/python benchmarks/seed_lessons.py --rate 1 --requests 24 --rounds 2
    .venv/bin/python benchmarks/seed_lessons.py --sim-only
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = ROOT / "models" / "tiny-qwen2-vl"


# ---- part A: the real server -----------------------------------------------------------------


def _row(name: str, r: dict[str, Any]) -> list[str]:
    def ms(k: str) -> str:
        v = r.get(k)
        return "n/a" if v is None else f"{v:.0f}"

    hit = r.get("prefix_cache_hit_rate")
    return [name, f"{r['request_throughput']:.2f}", f"{r['output_throughput']:.1f}",
            f"{r['total_token_throughput']:.1f}",
            f"{r['total_token_throughput'] / r['output_throughput']:.2f}",
            ms("median_ttft_ms"), ms("p99_ttft_ms"), ms("median_itl_ms"), ms("p99_itl_ms"),
            "n/a" if hit is None else f"{hit:.0%}", f"{r['completed']}/{r['num_prompts']}"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


async def _real(args: argparse.Namespace) -> str:
    from edgeserve.bench.arrivals import ArrivalConfig
    from edgeserve.bench.compare import ServerKind, server_argv
    from edgeserve.bench.datasets import DatasetConfig, DatasetKind
    from edgeserve.bench.run import RunConfig, run_benchmark
    from edgeserve.bench.server_process import ServerProcess
    from edgeserve.bench.sweep import warm_up
    from edgeserve.bench.throughput import direction_warning
    from edgeserve.net import free_port
    port = free_port()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    argv = server_argv(ServerKind.EDGESERVE_SPLIT, MODEL, port)
    server = ServerProcess(argv, out / "server.log", port=port).start()
    url = server.url
    print(f"server: {' '.join(argv[1:])}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {"chat": [], "prefix-repetition": []}
    try:
        await server.wait_ready(timeout_s=300)
        datasets = {"chat": DatasetConfig(kind=DatasetKind.CHAT),
                    "prefix-repetition": DatasetConfig(kind=DatasetKind.PREFIX_REPETITION)}
        for ds in datasets.values():
            await warm_up(RunConfig(base_url=url, dataset=ds, progress=False,
                                    print_dataset_stats=False), 2)
        for rnd in range(args.rounds):
            for name, ds in datasets.items():
                cfg = RunConfig(
                    base_url=url, dataset=ds, progress=False, label=f"{name} r{rnd}",
                    print_dataset_stats=rnd == 0, first_image_number=rnd * args.requests,
                    arrivals=ArrivalConfig(rate_rps=args.rate, num_requests=args.requests,
                                           seed=rnd))
                r = await run_benchmark(cfg)
                results[name].append(r)
                print(f"  round {rnd} {name}: {r['completed']} done, total "
                      f"{r['total_token_throughput']:.1f} tok/s, output "
                      f"{r['output_throughput']:.1f} tok/s, TTFT p50 {r['median_ttft_ms']:.0f} ms, "
                      f"load avg {r['loadavg_1m_after']:.2f}", flush=True)
    finally:
        server.stop()
    header = ["dataset (round)", "req/s", "output tok/s", "total tok/s", "total/output",
              "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "prefix hits",
              "completed"]
    rows = [_row(f"{n} ({i})", r) for i in range(args.rounds) for n, rs in results.items()
            for r in [rs[i]]]
    keys = [("request_throughput", "req/s"), ("output_throughput", "output tok/s"),
            ("total_token_throughput", "total tok/s"), ("median_ttft_ms", "TTFT p50"),
            ("median_itl_ms", "ITL p50")]
    ratio_rows = []
    for k, label in keys:
        ratios = [p[k] / c[k] for c, p in zip(results["chat"], results["prefix-repetition"],
                                               strict=True) if c.get(k) and p.get(k)]
        ratio_rows.append([label, f"{statistics.median(ratios):.2f}×",
                           f"{min(ratios):.2f}–{max(ratios):.2f}×"])
    warnings = [w for c, p in zip(results["chat"], results["prefix-repetition"], strict=True)
                if (w := direction_warning(c, p, "chat", "prefix-repetition"))]
    text = "\n".join([
        f"Real server (edgeserve serve, tiny model, this machine), Poisson {args.rate:g} req/s, "
        f"{args.requests} requests per run, {args.rounds} round(s) alternating:", "",
        _table(header, rows), "",
        _table(["prefix-repetition / chat", "median", "min–max"], ratio_rows),
        *(["", *warnings] if warnings else []),
    ])
    return text


# ---- part B: the simulator -------------------------------------------------------------------


def _sim_prefix() -> str:
    from sim.experiments.replicas_tp import Layout, Slo, Traffic, simulate
    from sim.scenario.config import load_cloud_profile
    from sim.scenario.deployment import BoxProfile, Deployment

    a100 = load_cloud_profile("h100-qwen2-vl-7b")  # one GPU, Qwen2-VL-7B bf16
    rows = []
    rate = 8.0
    cases = [
        ("chat-like (256 prompt, 128 output)", Traffic(rate, 256, 128, 2000), False),
        ("prefix repetition (256 shared of 10 + 256 unique, 128 output), cache on",
         Traffic(rate, 512, 128, 2000, prefix_tokens=256, num_prefixes=10), True),
        ("the same, prefix cache off", Traffic(rate, 512, 128, 2000, prefix_tokens=256,
                                               num_prefixes=10), False),
    ]
    for name, t, cache in cases:
        box = BoxProfile(a100, Deployment(prefix_caching=cache))
        p = simulate(box, Layout(1, 1), t, Slo())
        hit = p.extra.get("prefix_hit_rate")
        rows.append([name, f"{p.request_throughput:.2f}", f"{p.output_throughput:.0f}",
                     f"{p.total_token_throughput:.0f}",
                     f"{p.total_token_throughput / p.output_throughput:.2f}",
                     f"{p.ttft_p50_s * 1e3:.1f}", f"{p.tpot_p50_s * 1e3:.2f}",
                     "n/a" if hit is None else f"{hit:.0%}"])
    return "\n".join([
        f"Simulator 1 — prefix repetition vs chat, one H100 (h100-qwen2-vl-7b), Poisson "
        f"{rate:g} req/s, 2000 requests:", "",
        _table(["workload", "req/s", "output tok/s", "total tok/s", "total/output",
                "TTFT p50 ms", "TPOT p50 ms", "prefix hits"], rows)])


def _sim_quant() -> str:
    from sim.core.cloud import kv_capacity_tokens, max_concurrency, weight_bytes
    from sim.experiments.replicas_tp import Layout, Slo, Traffic, simulate
    from sim.scenario.config import load_cloud_profile
    from sim.scenario.deployment import BoxProfile, Deployment
    from sim.scenario.profiles import Dtype

    awq = load_cloud_profile("l4-qwen2-vl-7b-awq")
    bf16 = replace(awq, model=replace(awq.model, weight_dtype=Dtype.BF16))
    rows = []
    t = Traffic(rate_rps=0.5, prompt_tokens=1024, output_tokens=256, requests=1000)
    for name, prof, dep in [("bf16 weights (16.6 GB)", bf16, Deployment()),
                            ("4-bit weights, dtype size (4.15 GB)", awq, Deployment()),
                            ("4-bit checkpoint, weights_gb 5.7 (tower in 16 bit)", awq,
                             Deployment(weights_gb=5.7))]:
        p = simulate(BoxProfile(prof, dep), Layout(1, 1), t, Slo())
        rows.append([name, f"{weight_bytes(prof.model, dep) / 1e9:.2f}",
                     f"{kv_capacity_tokens(prof, dep)}", f"{max_concurrency(prof, 1280, dep)}",
                     f"{kv_capacity_tokens(prof, dep) // 4096}",
                     f"{p.ttft_p50_s * 1e3:.0f}", f"{p.tpot_p50_s * 1e3:.1f}"])
    ttft = [float(r[5]) for r in rows]
    tpot = [float(r[6]) for r in rows]
    return "\n".join([
        "Simulator 2 — 4-bit weights on one L4 24 GB (l4-qwen2-vl-7b-awq; bf16: the same profile "
        "with bf16 weights), 1024 + 256 tokens, Poisson 0.5 req/s:", "",
        _table(["weights", "weights GB", "KV tokens", "concurrent 1280-token requests "
                "(max_batch 64 caps)", "concurrent 4096-token requests (KV)", "TTFT p50 ms",
                "TPOT p50 ms"], rows), "",
        f"4-bit (weights_gb 5.7) vs bf16: TPOT {tpot[0] / tpot[2]:.2f}× lower, TTFT "
        f"{ttft[0] / ttft[2]:.2f}× lower, KV tokens {int(rows[2][2]) / int(rows[0][2]):.2f}×"])


def _sim_crossover() -> str:
    from sim.experiments.replicas_tp import Slo, Traffic, answer
    from sim.scenario.deployment import load_box_profile

    parts = []
    for box_name, rate, factors in [("l40s-x4-pcie-qwen2-vl-7b", 4.0, (0.25, 0.5, 1, 1.5, 2, 3, 4, 5)),
                                    ("a100-x8-nvlink-qwen2-vl-7b", 10.0, (0.25, 1, 2, 3, 4))]:
        box = load_box_profile(box_name)
        slo = Slo(ttft_p99_s=2.0, tpot_p99_s=0.05)
        a = answer(box, box.deployment.gpus, Traffic(rate_rps=rate, requests=1500), slo, factors)
        lays = sorted({p.layout for p in a.points}, key=lambda lay: lay.tp)
        rows = []
        for r in sorted({p.rate_rps for p in a.points}):
            pts = {p.layout: p for p in a.at(r)}
            ok = [p for p in pts.values() if p.met_slo]
            best = min(ok, key=lambda p: p.tpot_p99_s).layout.label if ok else "none"
            rows.append([f"{r:g}", *(f"{pts[lay].tpot_p99_s * 1e3:.1f} / "
                                     f"{pts[lay].ttft_p99_s:.2f}"
                                     + ("" if pts[lay].met_slo else " ✗") for lay in lays), best])
        parts += [f"Simulator 3 — replicas vs TP, {box_name} ({box.deployment.gpus} GPUs), 1024 + "
                  f"256 tokens, SLO TTFT p99 ≤ 2 s and TPOT p99 ≤ 50 ms; cells: TPOT p99 ms / "
                  f"TTFT p99 s (✗ missed):", "",
                  _table(["req/s", *(lay.label for lay in lays), "lowest TPOT p99 meeting SLO"],
                         rows), "",
                  "highest rate of the grid each layout sustains: " + ", ".join(
                      f"{lay.label} {a.max_sustained(lay) or 0:g} req/s" for lay in lays), ""]
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1.0, help="req/s of both real runs (default 1)")
    ap.add_argument("--requests", type=int, default=24, help="requests per real run (default 24)")
    ap.add_argument("--rounds", type=int, default=2, help="chat/prefix pairs (default 2)")
    ap.add_argument("--sim-only", action="store_true", help="skip part A (no server)")
    ap.add_argument("--out", default="results/seed_lessons", help="server log folder")
    args = ap.parse_args()
    sections = []
    if not args.sim_only:
        sections.append(asyncio.run(_real(args)))
    sections += [_sim_prefix(), _sim_quant(), _sim_crossover()]
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
