"""Serving with the vision encoder as its own stage: edgeserve split ``--encoder onnx`` vs split
without vs stock ``vllm serve``, in one run.

Runs ``edgeserve bench compare`` (edgeserve/bench/compare.py: each server started in turn,
pinned to the same cores, swept over the same Poisson arrival schedules, stopped) with the
server kinds ``edgeserve-split-onnx``, ``edgeserve-split`` and ``vllm`` (``python -m
vllm.entrypoints.openai.api_server``, the same as ``vllm serve``), on the tiny model at its own
pixel limit — the full 1280-token budget, where vLLM's engine spends most of its CPU in the
vision tower — with 12 MP photographs (4000×3000 JPEGs, every request a different image; all
bodies built before the timed part). Every server runs with its defaults otherwise: on 2 cores
edgeserve has one preprocessing worker, which with ``--encoder onnx`` also encodes.

It then prints, for several TTFT p99 bounds, the interpolated max sustained rate of each server
and its ratio to ``vllm`` (the target: split ``--encoder onnx`` ≥ 1.5× ``vllm serve``),
and copies the rate-curve plot and the summary to ``--docs`` (docs/results/ by default).

    .venv/bin/python benchmarks/encoder_serve.py --out results/encoder_serve
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVERS = ("edgeserve-split-onnx", "edgeserve-split", "vllm")
BOUNDS_MS = (1000.0, 2000.0, 3000.0, 5000.0)


def offered(points: list[dict[str, Any]], duration_s: float) -> list[dict[str, Any]]:
    """The points with ``request_rate`` set to what was offered: a seeded Poisson schedule of
    ``duration_s`` at a labelled rate holds more or fewer requests than rate × duration (at
    "1 req/s" for 20 s, 15 here), so the labels misstate the load a server sustained."""
    return [{**p, "request_rate": p["num_prompts"] / duration_s} for p in points]


def ratios(compare_json: Path, duration_s: float | None = None) -> dict[str, Any]:
    """Per TTFT p99 bound: each server's interpolated max sustained rate (median over rounds)
    and its ratio to vllm's (None where vllm sustained none of its rates); on the labelled
    rates, or with ``duration_s`` on the offered ones (:func:`offered`)."""
    import statistics

    from edgeserve.bench.compare import load
    from edgeserve.bench.sweep import interpolated_max_rate

    result = load(compare_json)
    by_server = result.sweeps["12mp"]
    out: dict[str, Any] = {}
    for bound in BOUNDS_MS:
        rates = {s: statistics.median([
            interpolated_max_rate(offered(r.points, duration_s) if duration_s else r.points,
                                  bound) or 0.0 for r in rs])
            for s, rs in by_server.items()}
        base = rates.get("vllm") or None
        out[f"{bound:g}"] = {"rates": rates,
                             "over_vllm": {s: (r / base if base else None) for s, r in rates.items()}}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="1,2,3,4,5,6", help="offered 12 MP request rates, req/s")
    p.add_argument("--duration-per-rate", type=float, default=12.0, help="seconds of arrivals")
    p.add_argument("--ttft-p99-bound", type=float, default=3000.0, metavar="MS")
    p.add_argument("--output-len", default="32")
    p.add_argument("--servers", default=",".join(SERVERS),
                   help="server kinds (edgeserve bench compare's; edgeserve-split-openvino = "
                   f"--encoder-provider openvino:CPU); default {','.join(SERVERS)}")
    p.add_argument("--rounds", type=int, default=1,
                   help="repeat the server sequence (A B C A B C …); rates are medians over rounds")
    p.add_argument("--server-arg", action="append", default=[], metavar="KIND=ARGS",
                   help="extra arguments for one server kind (edgeserve bench compare's), e.g. "
                   "edgeserve-split-onnx='--workers 1'")
    p.add_argument("--out", type=Path, default=Path("results/encoder_serve"))
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "results",
                   help="where encoder_serve.png and encoder_serve.json go")
    p.add_argument("--from-json", type=Path, default=None,
                   help="run nothing: report from an earlier run's compare.json")
    args = p.parse_args()

    compare_json = args.from_json or args.out / "compare.json"
    if args.from_json is None:
        from edgeserve.cli.main import main as edgeserve

        rc = edgeserve(["bench", "compare", "--servers", args.servers, "--workloads", "12mp",
                        "--workload-rates", f"12mp={args.rates}",
                        "--duration-per-rate", str(args.duration_per_rate), "--warmup", "2",
                        "--ttft-p99-bound", str(args.ttft_p99_bound),
                        "--output-len", args.output_len, "--rounds", str(args.rounds),
                        *(a for kv in args.server_arg for a in ("--server-arg", kv)),
                        "--no-progress", "--out", str(args.out)])
        if rc != 0:
            return rc
    setup = json.loads(compare_json.read_text()).get("setup", {})
    duration_s = float(setup["sweeps"]["12mp"]["duration_per_rate_s"] or args.duration_per_rate)
    table = ratios(compare_json)
    table_offered = ratios(compare_json, duration_s)
    for title, t in (("labelled", table), ("offered (requests / duration)", table_offered)):
        names = list(next(iter(t.values()))["rates"])
        print(f"\nmax sustained 12 MP req/s (interpolated on the {title} rates) and ratio to "
              "vllm, by TTFT p99 bound:")
        print(f"{'bound ms':>8} " + " ".join(f"{n:>28}" for n in names))
        for bound, row in t.items():
            cells = []
            for n in names:
                ratio = row["over_vllm"][n]
                cells.append(f"{row['rates'][n]:>6.2f} ({'n/a' if ratio is None else f'{ratio:.2f}x'})")
            print(f"{bound:>8} " + " ".join(f"{c:>28}" for c in cells))
    args.docs.mkdir(parents=True, exist_ok=True)
    plot = compare_json.parent / "rate_curves_12mp.png"
    if plot.exists():
        shutil.copy(plot, args.docs / "encoder_serve.png")
    (args.docs / "encoder_serve.json").write_text(json.dumps(
        {"setup": setup, "by_ttft_p99_bound_ms": table,
         "by_ttft_p99_bound_ms_offered_rates": table_offered}, indent=1) + "\n")
    print(f"saved {args.docs / 'encoder_serve.png'} and {args.docs / 'encoder_serve.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
