"""Replicas or tensor parallelism on two GPUs: measured with edgeserve, predicted by the simulator.

Two layouts of two GPUs serve the same model folder (``edgeserve models build-random
qwen2-vl-7b``: the published shape with random weights):

* ``2xTP1`` — ``edgeserve serve --replicas 2``: two engines, one GPU each, least-outstanding
  routing (:mod:`edgeserve.replicas`);
* ``1xTP2`` — ``edgeserve serve --tensor-parallel-size 2``: one engine over both GPUs.

Each gets the same Poisson rate sweep of 12 MP JPEG photos (unique per request) resized to the
full image budget (``--image-tokens``, 1280 as in ``gpu_compare.py``), 32–64 output tokens. The
interconnect is measured first: an all-reduce timed between the two GPUs
(:mod:`allreduce_bw`, NCCL). The simulator then predicts the same layouts at the same rates
(:func:`sim.experiments.replicas_tp.simulate`: the cloud profile of one GPU — ``--profile``, by
default the shipped H200 profile; a profile calibrated on one H200's TP1 run goes there — with a
deployment whose interconnect is the measured one and whose hidden size is the model's).

Per rate the output says which layout had the lower TTFT p99 (then E2E p50), measured and
simulated, and whether they agree; and per layout whether the predicted TTFT and E2E p50 are
within 10 % of the measured ones and the p99 within 20 %.

A lent GPU runs one command for at most 10 minutes, so each step can run alone
(``--steps allreduce``, ``--steps 2xTP1``, ``--steps 1xTP2``): each writes its part under
``--parts`` and every invocation merges the parts present into ``--out``
(``benchmarks/results/tp_layouts.json``) and a plot beside it.

``--smoke`` runs the whole path on this CPU with the tiny model: ``1xTP1`` against ``2xTP1``
(two CPU replicas, a core each), no all-reduce (a CPU has no GPU interconnect; the simulated TP
layouts are then left out) and the H200 profile's prediction, which says nothing about a CPU.

    python benchmarks/tp_layouts.py --model /tmp/qwen2-vl-7b          # two GPUs, every step
    python benchmarks/tp_layouts.py --model /tmp/qwen2-vl-7b --steps 1xTP2
    python benchmarks/tp_layouts.py --smoke                           # CPU, tiny model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from edgeserve.bench.arrivals import arrival_offsets_s  # noqa: E402
from edgeserve.bench.gpu_busy import device_name  # noqa: E402
from edgeserve.bench.report import percentile_key  # noqa: E402
from edgeserve.bench.run import RunConfig, run_benchmark  # noqa: E402
from edgeserve.bench.server_process import ServerProcess  # noqa: E402
from edgeserve.bench.sweep import warm_up  # noqa: E402
from edgeserve.bench.workload import WorkloadConfig  # noqa: E402

SERVED_NAME = "m"
GPU_RATES_RPS = (1.0, 2.0, 4.0, 8.0, 12.0, 16.0)
SMOKE_RATES_RPS = (0.5, 1.0)
GPU_LAYOUTS = ("2xTP1", "1xTP2")
SMOKE_LAYOUTS = ("1xTP1", "2xTP1")
DEFAULT_PROFILE = ROOT / "models" / "profiles" / "h200-qwen2-vl-7b.yaml"
OUT = ROOT / "benchmarks" / "results" / "tp_layouts.json"
PHOTO_PIXELS = 4000 * 3000  # the workload's 12 MP photos
TEXT_TOKENS = 24  # the prompt's text and chat template around the image
P50_TOLERANCE, P99_TOLERANCE = 0.10, 0.20
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Layout:
    """``replicas × TP`` on ``replicas · tp`` GPUs; named ``2xTP1`` and so on."""

    replicas: int
    tp: int

    @classmethod
    def parse(cls, name: str) -> Layout:
        r, _, t = name.lower().partition("xtp")
        if not (r.isdigit() and t.isdigit()) or int(r) < 1 or int(t) < 1:
            raise ValueError(f"a layout is RxTPT such as 2xTP1, got {name!r}")
        return cls(int(r), int(t))

    @property
    def name(self) -> str:
        return f"{self.replicas}xTP{self.tp}"


@dataclass(frozen=True, slots=True)
class TpLayoutsConfig:
    model: Path
    layouts: tuple[Layout, ...]  # the layouts of the output
    run_now: tuple[Layout, ...]  # of those, the ones this invocation measures
    measure_allreduce: bool
    rates_rps: tuple[float, ...] = GPU_RATES_RPS
    image_tokens: int = 1280
    duration_s: float = 15.0
    output_len: str = "32-64"
    max_num_seqs: int = 64
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.85
    smoke: bool = False
    profile: Path = DEFAULT_PROFILE
    port: int = 18700
    startup_timeout_s: float = 480.0
    parts: Path = Path("/tmp/edgeserve_tp_layouts")
    out: Path = OUT

    def __post_init__(self) -> None:
        if not (self.model / "config.json").exists():
            raise ValueError(f"no model folder at {self.model} (edgeserve models build-random "
                             "qwen2-vl-7b --out DIR)")
        if list(self.rates_rps) != sorted(self.rates_rps) or min(self.rates_rps) <= 0:
            raise ValueError(f"rates must be positive and increasing, got {self.rates_rps}")
        if self.duration_s <= 0 or self.image_tokens < 4:
            raise ValueError("the duration must be > 0 s and the image tokens >= 4")
        if not self.profile.is_file():
            raise ValueError(f"no cloud profile at {self.profile}")

    @property
    def budget_dir(self) -> Path:
        return self.parts / f"{self.model.name}-{self.image_tokens}tok"

    @property
    def output_tokens_mean(self) -> int:
        lo, _, hi = self.output_len.partition("-")
        return (int(lo) + int(hi or lo)) // 2

    def argv(self, layout: Layout) -> list[str]:
        """``edgeserve serve`` for ``layout`` (the same engine limits for every layout)."""
        from mm_preproc.spec import read_spec

        max_pixels = read_spec(self.model).budget(self.image_tokens)
        argv = ["--model", str(self.model), "--served-model-name", SERVED_NAME,
                "--max-pixels", str(max_pixels), "--max-model-len", str(self.max_model_len),
                "--max-num-seqs", str(self.max_num_seqs), "--replicas", str(layout.replicas),
                "--tensor-parallel-size", str(layout.tp),
                "--engine-log", str(self.budget_dir / "logs" / f"{layout.name}.engine.log")]
        if self.smoke:
            return [*argv, "--kv-cache-memory-bytes", str(256 * MiB)]
        return [*argv, "--gpu-memory-utilization", str(self.gpu_memory_utilization)]


# ---- measured ------------------------------------------------------------------------------
def point_figures(p: dict[str, Any]) -> dict[str, Any]:
    """One rate's figures in seconds (None where nothing completed)."""
    def s(key: str) -> float | None:
        v = p.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) / 1e3

    return {"rate_rps": float(p["request_rate"]), "completed": int(p.get("completed") or 0),
            "failed": int(p.get("failed") or 0),
            "throughput_rps": float(p.get("request_throughput") or 0.0),
            "ttft_p50_s": s("median_ttft_ms"), "ttft_p99_s": s(percentile_key("ttft", 99.0)),
            "e2e_p50_s": s("median_e2el_ms"), "e2e_p99_s": s(percentile_key("e2el", 99.0))}


def replica_routed(server: ServerProcess) -> list[int] | None:
    """Requests each replica received (``/health``), or None for a single server."""
    body = server.get_json("/health")
    return [int(r["routed_total"]) for r in body["replicas"]] if "replicas" in body else None


async def sweep_layout(cfg: TpLayoutsConfig, layout: Layout) -> dict[str, Any]:
    """Start ``layout``'s server, warm it, run the rate sweep; its part of the output."""
    from gpu_compare import GpuCompareConfig, Server, _arrivals, bodies

    log = cfg.budget_dir / "logs" / f"{layout.name}.log"
    server = ServerProcess.edgeserve(cfg.argv(layout), log, port=cfg.port)
    workload = WorkloadConfig(model=SERVED_NAME, sizes="12mp", output_len=cfg.output_len)
    # the same request bodies and arrival schedules as the GPU head-to-head
    shared = GpuCompareConfig(model=cfg.model, servers=(Server.SPLIT,),
                              image_tokens=cfg.image_tokens, duration_s=cfg.duration_s,
                              output_len=cfg.output_len, bodies=cfg.parts / "bodies")
    points = []
    try:
        t0 = time.monotonic()
        server.start()
        await server.wait_ready(cfg.startup_timeout_s)
        print(f"{layout.name} ready after {time.monotonic() - t0:.0f} s", flush=True)
        base = RunConfig(base_url=server.url, workload=workload, label=layout.name,
                         progress=False, print_dataset_stats=False)
        await warm_up(base, 1 if cfg.smoke else 2)
        for i, rate in enumerate(cfg.rates_rps):
            arrivals = _arrivals(shared, i, rate)
            offsets = [float(x) for x in arrival_offsets_s(arrivals)]
            point = await run_benchmark(replace(base, arrivals=arrivals,
                                                label=f"{layout.name} @ {rate:g} req/s"),
                                        prepared=(bodies(shared, i, len(offsets)), offsets))
            fig = point_figures(point)
            fig["routed_per_replica"] = replica_routed(server)
            points.append(fig)
            print(point_line(layout.name, fig), flush=True)
    finally:
        server.stop()
    return {"layout": layout.name, "command": shlex.join(["edgeserve", "serve", *cfg.argv(layout)]),
            "points": points}


def point_line(name: str, f: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1e3:.0f}"

    routed = f.get("routed_per_replica")
    return (f"  {name} @ {f['rate_rps']:g} req/s: {f['throughput_rps']:.2f} done/s, TTFT p50 "
            f"{ms(f['ttft_p50_s'])} p99 {ms(f['ttft_p99_s'])} ms, E2E p50 {ms(f['e2e_p50_s'])} "
            f"p99 {ms(f['e2e_p99_s'])} ms, failed {f['failed']}"
            + (f", routed so far per replica {routed}" if routed else ""))


# ---- simulated -----------------------------------------------------------------------------
def simulated(cfg: TpLayoutsConfig, layouts: list[Layout], allreduce: dict[str, Any] | None,
              hidden_size: int) -> dict[str, list[dict[str, Any]]]:
    """The simulator's figures for every layout it can price at every rate of the sweep."""
    from sim.experiments.replicas_tp import Layout as SimLayout
    from sim.experiments.replicas_tp import Slo, Traffic, simulate
    from sim.scenario.config import load_cloud_profile
    from sim.scenario.deployment import BoxProfile, Deployment, Interconnect, InterconnectKind

    profile = load_cloud_profile(str(cfg.profile))
    link = None if allreduce is None else Interconnect(
        InterconnectKind.NVLINK, allreduce["bandwidth_gb_s"], allreduce["latency_s"])
    out: dict[str, list[dict[str, Any]]] = {}
    for lay in layouts:
        if lay.tp > 1 and link is None:
            continue  # no measured interconnect: TP is not priced
        dep = Deployment(tp_size=lay.tp, interconnect=link, hidden_size=hidden_size,
                         gpus=lay.replicas * lay.tp)
        rows = []
        for rate in cfg.rates_rps:
            traffic = Traffic(rate_rps=rate, prompt_tokens=cfg.image_tokens + TEXT_TOKENS,
                              output_tokens=cfg.output_tokens_mean,
                              requests=max(200, int(rate * cfg.duration_s * 4)),
                              image_tokens=cfg.image_tokens, source_pixels=PHOTO_PIXELS)
            p = simulate(BoxProfile(profile, dep), SimLayout(lay.replicas, lay.tp), traffic, Slo())
            rows.append({"rate_rps": rate, "throughput_rps": p.request_throughput,
                         "ttft_p50_s": p.ttft_p50_s, "ttft_p99_s": p.ttft_p99_s,
                         "e2e_p50_s": p.e2e_p50_s, "e2e_p99_s": p.e2e_p99_s})
        out[lay.name] = rows
    return out


# ---- comparison ----------------------------------------------------------------------------
def winner(by_layout: dict[str, list[dict[str, Any]]], i: int) -> str | None:
    """The layout with the lowest TTFT p99 at rate ``i`` (then E2E p50), as the simulator's
    ``replicas-tp`` advice ranks them; None unless every layout has the rate."""
    rows = {name: pts[i] for name, pts in by_layout.items() if i < len(pts)}
    if len(rows) < len(by_layout) or any(r["ttft_p99_s"] is None for r in rows.values()):
        return None
    return min(rows, key=lambda n: (rows[n]["ttft_p99_s"], rows[n]["e2e_p50_s"] or math.inf))


def within(measured: dict[str, list[dict[str, Any]]],
           sim: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, bool | None]]]:
    """Per layout and rate: whether each predicted figure is within its tolerance."""
    out: dict[str, list[dict[str, bool | None]]] = {}
    for name, pts in measured.items():
        rows = []
        for m, s in zip(pts, sim.get(name, []), strict=False):
            row: dict[str, bool | None] = {}
            for key in ("ttft_p50_s", "e2e_p50_s", "ttft_p99_s", "e2e_p99_s"):
                tol = P50_TOLERANCE if "p50" in key else P99_TOLERANCE
                row[key] = None if not m[key] else abs(s[key] - m[key]) <= tol * m[key]
            rows.append(row)
        out[name] = rows
    return out


def model_hidden_size(model: Path) -> int:
    """The language model's hidden size (the all-reduce message per token), wherever the
    folder's config.json keeps it (top level, or ``text_config`` in newer transformers)."""
    config = json.loads((model / "config.json").read_text())
    return int(config.get("hidden_size") or config.get("text_config", {}).get("hidden_size") or 0)


def merge(cfg: TpLayoutsConfig, device: str) -> dict[str, Any]:
    """Every part present → the output JSON and its plot."""
    parts = {p.stem: json.loads(p.read_text()) for p in sorted(cfg.budget_dir.glob("*.json"))}
    allreduce = parts.pop("allreduce", None)
    names = [lay.name for lay in cfg.layouts]
    measured = {n: parts[n]["points"] for n in names if n in parts}
    hidden = model_hidden_size(cfg.model)
    sim = simulated(cfg, [Layout.parse(n) for n in names], allreduce, hidden)
    rates = list(cfg.rates_rps)
    agrees: list[bool | None] = []
    for i in range(len(rates)):
        mw, sw = winner(measured, i) if len(measured) == len(names) else None, winner(sim, i)
        agrees.append(None if mw is None or sw is None else mw == sw)
    out = {
        "rates": rates, "measured": measured, "simulated": sim, "winner_agrees": agrees,
        "winner": {"measured": [winner(measured, i) if len(measured) == len(names) else None
                                for i in range(len(rates))],
                   "simulated": [winner(sim, i) for i in range(len(rates))]},
        "within_tolerance": within(measured, sim),
        "tolerance": {"p50": P50_TOLERANCE, "p99": P99_TOLERANCE},
        "allreduce": allreduce if allreduce is not None else (
            "not measured (smoke: no GPU interconnect on a CPU)" if cfg.smoke else "not measured"),
        "profile": str(cfg.profile.relative_to(ROOT) if cfg.profile.is_relative_to(ROOT)
                       else cfg.profile),
        "model": cfg.model.name, "device": device, "smoke": cfg.smoke,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "image_tokens": cfg.image_tokens,
        "images": "12 MP (4000x3000) JPEG photos, unique per request",
        "arrivals": f"Poisson, {cfg.duration_s:g} s per rate", "output_len": cfg.output_len,
        "commands": {n: parts[n]["command"] for n in measured},
    }
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cfg.out.write_text(json.dumps(out, indent=1))
    plot(out, cfg.out.with_suffix(".png"))
    return out


def plot(out: dict[str, Any], path: Path) -> None:
    """TTFT p50/p99 and E2E p50 against the offered rate: measured solid, simulated dashed."""
    from sim.experiments.plots import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    color = {name: f"C{j}" for j, name in enumerate(sorted({*out["measured"], *out["simulated"]}))}
    for ax, key in zip(axes, ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s"), strict=True):
        for kind, style in (("measured", "-"), ("simulated", "--")):
            for name, pts in sorted(out[kind].items()):
                xs = [p["rate_rps"] for p in pts if p[key] is not None]
                ys = [p[key] for p in pts if p[key] is not None]
                ax.plot(xs, ys, style, marker="o", color=color[name], label=f"{name} {kind}")
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(key.replace("_s", " (s)").replace("_", " "))
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"replicas vs TP: {out['model']} on {out['device']}, {out['image_tokens']} "
                 f"image tokens ({out['date']})", fontsize=10)
    save(fig, path)


# ---- running -------------------------------------------------------------------------------
def summary_lines(out: dict[str, Any]) -> list[str]:
    lines = []
    for i, rate in enumerate(out["rates"]):
        mw, sw = out["winner"]["measured"][i], out["winner"]["simulated"][i]
        lines.append(f"  {rate:g} req/s: measured best {mw or 'n/a'}, simulated best "
                     f"{sw or 'n/a'}, agree {out['winner_agrees'][i]}")
    for name, rows in out["within_tolerance"].items():
        ok = sum(1 for r in rows for v in r.values() if v)
        total = sum(1 for r in rows for v in r.values() if v is not None)
        lines.append(f"  {name}: {ok}/{total} predicted figures within tolerance "
                     f"(p50 {P50_TOLERANCE:.0%}, p99 {P99_TOLERANCE:.0%})")
    return lines


async def main_async(cfg: TpLayoutsConfig) -> int:
    device = device_name() or ("cpu (smoke)" if cfg.smoke else "no GPU found")
    cfg.budget_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    if cfg.measure_allreduce:
        from allreduce_bw import measure

        ar = measure(2)
        (cfg.budget_dir / "allreduce.json").write_text(json.dumps(ar))
        print(f"all-reduce over 2 GPUs: {ar['bandwidth_gb_s']:.1f} GB/s, "
              f"{ar['latency_s'] * 1e6:.1f} µs per hop", flush=True)
    elif cfg.smoke:
        print("all-reduce: not measured (smoke: a CPU has no GPU interconnect)", flush=True)
    for layout in cfg.run_now:
        print(f"== {layout.name} ({cfg.image_tokens} image tokens, {device})", flush=True)
        try:
            part = await sweep_layout(cfg, layout)
        except RuntimeError as e:
            print(f"  {layout.name} failed: {e}", flush=True)
            failed = True
            continue
        (cfg.budget_dir / f"{layout.name}.json").write_text(json.dumps(part))
    out = merge(cfg, device)
    print("\n".join(summary_lines(out)), flush=True)
    print(f"wrote {cfg.out} and {cfg.out.with_suffix('.png')}", flush=True)
    return 1 if failed else 0


def config_from_args(argv: list[str] | None = None) -> TpLayoutsConfig:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="model folder (default: the tiny model with "
                   "--smoke; otherwise required)")
    p.add_argument("--steps", default="", help="allreduce and/or layouts to run now, e.g. "
                   "allreduce,2xTP1 (default: all); the parts already present are merged")
    p.add_argument("--image-tokens", type=int, default=1280)
    p.add_argument("--rates", default=None, help="offered req/s, e.g. 1,2,4,8")
    p.add_argument("--duration", type=float, default=None, help="seconds of arrivals per rate")
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE,
                   help="the simulator's cloud profile of one GPU (default: the shipped H200 one)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--parts", type=Path, default=Path("/tmp/edgeserve_tp_layouts"))
    p.add_argument("--smoke", action="store_true",
                   help="the whole path on the CPU with the tiny model: 1xTP1 against 2xTP1")
    a = p.parse_args(argv)
    model = a.model
    if model is None:
        if not a.smoke:
            p.error("--model DIR is required (edgeserve models build-random qwen2-vl-7b --out DIR)")
        from models.tiny_qwen2_vl import DEFAULT_DIR, build

        model = build(DEFAULT_DIR)
    layouts = tuple(Layout.parse(n) for n in (SMOKE_LAYOUTS if a.smoke else GPU_LAYOUTS))
    steps = {s.strip() for s in a.steps.split(",") if s.strip()}
    unknown = steps - {"allreduce", *(lay.name for lay in layouts)}
    if unknown:
        p.error(f"--steps: unknown {', '.join(sorted(unknown))}")
    run_now = tuple(lay for lay in layouts if not steps or lay.name in steps)
    rates = tuple(float(r) for r in a.rates.split(",")) if a.rates else (
        SMOKE_RATES_RPS if a.smoke else GPU_RATES_RPS)
    try:
        return TpLayoutsConfig(
            model=Path(model), layouts=layouts, run_now=run_now, rates_rps=rates, image_tokens=a.image_tokens,
            measure_allreduce=not a.smoke and (not steps or "allreduce" in steps),
            duration_s=a.duration or (6.0 if a.smoke else 15.0), smoke=a.smoke,
            output_len="8-16" if a.smoke else "32-64", max_num_seqs=16 if a.smoke else 64,
            profile=a.profile, parts=a.parts,
            out=a.out or (ROOT / "results" / "tp_layouts_smoke.json" if a.smoke
                          else OUT))
    except ValueError as e:
        p.error(str(e))
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(asyncio.run(main_async(config_from_args())))
