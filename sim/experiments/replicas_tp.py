"""Replicas or tensor parallelism? ``N`` GPUs served as ``N/tp`` replicas of ``tp`` GPUs each.

More GPUs are not always faster per request. With ``tp`` GPUs per replica every GPU reads
``1/tp`` of the weights per step, so a decode step — memory-bound at small batches — gets up to
``tp`` times shorter, and the replica holds more than ``tp`` times the KV tokens (the weights
shrink per GPU). But every step pays two all-reduces per layer over the interconnect, and there
are ``tp`` times fewer replicas to spread the load over. On NVLink the all-reduces cost little
and TP wins on latency; on PCIe they can cost more than they save, and independent replicas —
no communication at all — win, above all under load. The answer depends on the model, the box,
the arrival rate and the SLO, so this module simulates every layout and says which meets the
SLO at the asked rate.

The model is cloud-only: Poisson arrivals straight into one :class:`~sim.core.cloud.CloudServer`
(least-loaded routing over its replicas, the roofline engine priced per GPU with the
all-reduces, :mod:`sim.scenario.deployment`), requests of fixed prompt and output lengths, optionally
starting with one of a few shared prefixes (prefix caching on). For each layout and each rate of
a grid around the asked one it reports TTFT p50/p99, TPOT p50/p99, request, output and total
token throughput, whether the SLO held (TTFT p99 and TPOT p99 within bounds, every request
served), and the highest sustained rate of the grid.

    edgeserve sim replicas-tp --box a100-x8-nvlink-qwen2-vl-7b --gpus 8 --rate 20 \\
        --ttft-p99 2 --tpot-p99 0.1 --out results/replicas_tp
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.records import RequestRecord
from sim.core.cloud import CloudServer, kv_capacity_tokens
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.scenario.deployment import BoxProfile

RATE_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)  # the grid around the asked rate


@dataclass(slots=True, frozen=True)
class Traffic:
    """What arrives: Poisson requests of fixed lengths, optionally with shared prefixes, and
    optionally one image each (``image_tokens`` of the prompt are its tokens, ``source_pixels``
    the photo's size: the server preprocesses it before the engine, and the encoder runs in the
    prefill, both priced by the profile)."""

    rate_rps: float
    prompt_tokens: int = 1024
    output_tokens: int = 256
    requests: int = 2000
    prefix_tokens: int = 0  # the first tokens of the prompt shared with other requests
    num_prefixes: int = 1
    seed: int = 0
    image_tokens: int = 0  # of prompt_tokens, the image's
    source_pixels: int = 0  # the image's pixels as sent (0: no image)

    def __post_init__(self) -> None:
        if not self.rate_rps > 0 or math.isinf(self.rate_rps):
            raise ValueError(f"the arrival rate must be finite and > 0 req/s, got {self.rate_rps}")
        if self.prompt_tokens < 1 or self.output_tokens < 1 or self.requests < 1:
            raise ValueError("prompt, output and request counts must be >= 1")
        if not 0 <= self.prefix_tokens <= self.prompt_tokens:
            raise ValueError("the shared prefix must be within the prompt")
        if self.num_prefixes < 1:
            raise ValueError("need at least one prefix")
        if not 0 <= self.image_tokens <= self.prompt_tokens or self.source_pixels < 0:
            raise ValueError("the image's tokens must be within the prompt, its pixels >= 0")


@dataclass(slots=True, frozen=True)
class Slo:
    ttft_p99_s: float = 2.0
    tpot_p99_s: float | None = None

    def __post_init__(self) -> None:
        if not self.ttft_p99_s > 0 or (self.tpot_p99_s is not None and not self.tpot_p99_s > 0):
            raise ValueError("SLO bounds must be > 0 s")


@dataclass(slots=True, frozen=True)
class Layout:
    replicas: int
    tp: int

    @property
    def label(self) -> str:
        return f"{self.replicas}×TP{self.tp}"


@dataclass(slots=True)
class Point:
    """One layout at one rate."""

    layout: Layout
    rate_rps: float
    completed: int
    failed: int
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    kv_tokens_per_replica: int
    e2e_p50_s: float = math.inf
    e2e_p99_s: float = math.inf
    met_slo: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def layouts(gpus: int, box: BoxProfile, tokens_per_request: int) -> list[Layout]:
    """Every ``replicas × tp = gpus`` with ``tp`` a power of two whose replica holds a request."""
    out = []
    tp = 1
    while tp <= gpus:
        if gpus % tp == 0 and (tp == 1 or box.deployment.interconnect is not None) and \
                kv_capacity_tokens(box.profile, box.deployment.with_tp(tp)) >= tokens_per_request:
            out.append(Layout(gpus // tp, tp))
        tp *= 2
    return out


def simulate(box: BoxProfile, layout: Layout, traffic: Traffic, slo: Slo) -> Point:
    """Run ``traffic`` through one layout until every request has left."""
    dep = box.deployment.with_tp(layout.tp)
    loop = EventLoop()
    done: list[Job] = []
    server = CloudServer(loop, "box", box.profile, layout.replicas, done.append, deployment=dep)
    rng = np.random.default_rng(traffic.seed)
    gaps = rng.exponential(1.0 / traffic.rate_rps, traffic.requests)
    times = np.cumsum(gaps)
    prefixes = rng.integers(0, traffic.num_prefixes, traffic.requests)

    def arrive(arg: tuple[Job, int]) -> None:
        server.submit_prefixed(arg[0], arg[1], traffic.prefix_tokens)

    for i in range(traffic.requests):
        t = float(times[i])
        job = Job(RequestRecord(id=str(i), arrived_s=t), None, traffic.source_pixels,
                  traffic.source_pixels, traffic.image_tokens, traffic.prompt_tokens,
                  traffic.output_tokens)
        # the image's preprocessing on the server's many cores: a delay, not a queue
        loop.at(t + server.preprocess_s(job), arrive, (job, int(prefixes[i])))
    loop.run_until(math.inf)
    spans = [(j.rec.arrived_s, j.rec.first_token_s, j.rec.last_token_s) for j in done]
    ok = [(a, f, e) for a, f, e in spans if f is not None and e is not None]
    out = traffic.output_tokens
    ttft = np.array([f - a for a, f, _ in ok])
    tpot = np.array([(e - f) / (out - 1) for _, f, e in ok]) if out > 1 else np.zeros(len(ok))
    e2e = np.array([e - a for a, _, e in ok])
    span = max(e for _, _, e in ok) - float(times[0]) if ok else 1.0
    n = len(ok)
    point = Point(
        layout=layout, rate_rps=traffic.rate_rps, completed=n, failed=traffic.requests - n,
        ttft_p50_s=float(np.median(ttft)) if n else math.inf,
        ttft_p99_s=float(np.percentile(ttft, 99)) if n else math.inf,
        tpot_p50_s=float(np.median(tpot)) if n else math.inf,
        tpot_p99_s=float(np.percentile(tpot, 99)) if n else math.inf,
        request_throughput=n / span,
        output_throughput=n * out / span,
        total_token_throughput=n * (traffic.prompt_tokens + out) / span,
        kv_tokens_per_replica=server.kv_capacity_tokens,
        e2e_p50_s=float(np.median(e2e)) if n else math.inf,
        e2e_p99_s=float(np.percentile(e2e, 99)) if n else math.inf,
    )
    if server.prefix_caches:
        hits = sum(c.hits for c in server.prefix_caches)
        point.extra["prefix_hit_rate"] = hits / max(1, hits + sum(c.misses for c in
                                                                server.prefix_caches))
    point.met_slo = point.failed == 0 and point.ttft_p99_s <= slo.ttft_p99_s and (
        slo.tpot_p99_s is None or point.tpot_p99_s <= slo.tpot_p99_s)
    return point


@dataclass(slots=True)
class Answer:
    """Every layout over the rate grid, and the verdict at the asked rate."""

    box: str
    gpus: int
    rate_rps: float
    slo: Slo
    points: list[Point]

    def at(self, rate: float) -> list[Point]:
        return [p for p in self.points if p.rate_rps == rate]

    def max_sustained(self, layout: Layout) -> float | None:
        best = None
        for p in sorted((p for p in self.points if p.layout == layout), key=lambda p: p.rate_rps):
            if not p.met_slo:
                break
            best = p.rate_rps
        return best

    @property
    def best(self) -> Point | None:
        """At the asked rate: among layouts meeting the SLO, the lowest TTFT p99 (then TPOT)."""
        ok = [p for p in self.at(self.rate_rps) if p.met_slo]
        return min(ok, key=lambda p: (p.ttft_p99_s, p.tpot_p99_s)) if ok else None

    def verdict(self) -> str:
        best = self.best
        ranked = sorted({p.layout for p in self.points},
                        key=lambda lay: -(self.max_sustained(lay) or 0.0))
        cap = ", ".join(f"{lay.label} {_rate(self.max_sustained(lay))}" for lay in ranked)
        head = (f"at {self.rate_rps:g} req/s on {self.gpus} GPUs of {self.box}: "
                + (f"{best.layout.label} (TTFT p99 {best.ttft_p99_s:.3f} s, TPOT p99 "
                   f"{best.tpot_p99_s * 1e3:.1f} ms)" if best else "no layout meets the SLO"))
        return f"{head}; highest sustained rate of the grid: {cap}"


def _rate(r: float | None) -> str:
    return "none" if r is None else f"{r:g} req/s"


def answer(box: BoxProfile, gpus: int, traffic: Traffic, slo: Slo,
           rate_factors: Sequence[float] = RATE_FACTORS) -> Answer:
    """Simulate every layout of ``gpus`` GPUs at rates ``factor × traffic.rate_rps``."""
    if box.deployment.gpus and gpus > box.deployment.gpus:
        raise ValueError(f"{box.name} has {box.deployment.gpus} GPUs, not {gpus}")
    lays = layouts(gpus, box, traffic.prompt_tokens + traffic.output_tokens)
    if not lays:
        raise ValueError(f"no layout of {gpus} GPUs of {box.name} holds one request of "
                         f"{traffic.prompt_tokens + traffic.output_tokens} tokens")
    points = []
    for f in sorted(set(rate_factors) | {1.0}):
        t = Traffic(**{**_fields(traffic), "rate_rps": traffic.rate_rps * f})
        points += [simulate(box, lay, t, slo) for lay in lays]
    return Answer(box.name, gpus, traffic.rate_rps, slo, points)


def _fields(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


def format_answer(a: Answer) -> str:
    rows = ["| layout | req/s offered | done req/s | output tok/s | total tok/s | TTFT p50 s | "
            "TTFT p99 s | TPOT p50 ms | TPOT p99 ms | KV tokens/replica | SLO |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in sorted(a.points, key=lambda p: (p.rate_rps, p.layout.tp)):
        rows.append(
            f"| {p.layout.label} | {p.rate_rps:g} | {p.request_throughput:.2f} | "
            f"{p.output_throughput:.0f} | {p.total_token_throughput:.0f} | {p.ttft_p50_s:.3f} | "
            f"{p.ttft_p99_s:.3f} | {p.tpot_p50_s * 1e3:.1f} | {p.tpot_p99_s * 1e3:.1f} | "
            f"{p.kv_tokens_per_replica} | {'met' if p.met_slo else 'missed'} |")
    return "\n".join([*rows, "", a.verdict()])


def plot_answer(a: Answer, path: Path) -> Path:
    """TTFT p99 and TPOT p99 against offered rate, one line per layout, SLO and asked rate marked."""
    from sim.experiments.plots import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for lay in sorted({p.layout for p in a.points}, key=lambda lay: lay.tp):
        pts = sorted((p for p in a.points if p.layout == lay), key=lambda p: p.rate_rps)
        rates = [p.rate_rps for p in pts]
        axes[0].plot(rates, [p.ttft_p99_s for p in pts], marker="o", label=lay.label)
        axes[1].plot(rates, [p.tpot_p99_s * 1e3 for p in pts], marker="o", label=lay.label)
    axes[0].axhline(a.slo.ttft_p99_s, color="k", ls="--", lw=1, label="SLO")
    if a.slo.tpot_p99_s is not None:
        axes[1].axhline(a.slo.tpot_p99_s * 1e3, color="k", ls="--", lw=1, label="SLO")
    for ax, title in zip(axes, ("TTFT p99 (s)", "TPOT p99 (ms)"), strict=True):
        ax.axvline(a.rate_rps, color="grey", ls=":", lw=1)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel(title)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"replicas × TP on {a.gpus} GPUs: {a.box}", fontsize=10)
    return save(fig, path)


def to_json(a: Answer) -> dict[str, Any]:
    return {
        "box": a.box, "gpus": a.gpus, "rate_rps": a.rate_rps,
        "slo": {"ttft_p99_s": a.slo.ttft_p99_s, "tpot_p99_s": a.slo.tpot_p99_s},
        "best": a.best.layout.label if a.best else None,
        "max_sustained_rps": {lay.label: a.max_sustained(lay) for lay in {p.layout for p in a.points}},
        "points": [{**{k: v for k, v in _fields(p).items() if k != "layout"},
                    "layout": p.layout.label} for p in a.points],
    }


# ---- command line (``edgeserve sim replicas-tp``) ------------------------------------------


def add_arguments(p: Any) -> None:
    """The flags of ``edgeserve sim replicas-tp``."""
    p.add_argument("--box", default="a100-x8-nvlink-qwen2-vl-7b",
                   help="box profile: a name in models/profiles/boxes/ or a YAML path "
                   "(default a100-x8-nvlink-qwen2-vl-7b; also l40s-x4-pcie-qwen2-vl-7b)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all of the box)")
    p.add_argument("--rate", type=float, required=True, help="arrival rate to answer for, req/s")
    p.add_argument("--ttft-p99", type=float, default=2.0, metavar="S",
                   help="SLO: TTFT p99 bound in seconds (default 2)")
    p.add_argument("--tpot-p99", type=float, default=None, metavar="S",
                   help="SLO: TPOT p99 bound in seconds (default: none)")
    p.add_argument("--prompt-tokens", type=int, default=1024, help="default 1024")
    p.add_argument("--output-tokens", type=int, default=256, help="default 256")
    p.add_argument("--prefix-tokens", type=int, default=0,
                   help="shared prefix length (turns prefix caching on when > 0)")
    p.add_argument("--num-prefixes", type=int, default=1, help="distinct shared prefixes")
    p.add_argument("--weights-gb", type=float, default=None,
                   help="checkpoint size override (e.g. a 4-bit checkpoint)")
    p.add_argument("--requests", type=int, default=2000, help="requests per simulated run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None,
                   help="write replicas_tp.json and replicas_tp.png here")


def run_cli(args: Any) -> int:
    """``edgeserve sim replicas-tp``: the table, the verdict, and with ``--out`` JSON and plot."""
    import json
    import sys
    from dataclasses import replace

    from sim.scenario.deployment import load_box_profile
    from sim.scenario.schema import ConfigError

    try:
        box = load_box_profile(args.box)
        dep = box.deployment
        if args.weights_gb is not None or args.prefix_tokens > 0:
            dep = replace(dep, weights_gb=args.weights_gb if args.weights_gb is not None
                          else dep.weights_gb, prefix_caching=dep.prefix_caching or
                          args.prefix_tokens > 0)
            box = BoxProfile(box.profile, dep)
        traffic = Traffic(rate_rps=args.rate, prompt_tokens=args.prompt_tokens,
                          output_tokens=args.output_tokens, requests=args.requests,
                          prefix_tokens=args.prefix_tokens, num_prefixes=args.num_prefixes,
                          seed=args.seed)
        slo = Slo(ttft_p99_s=args.ttft_p99, tpot_p99_s=args.tpot_p99)
        a = answer(box, args.gpus or dep.gpus or 1, traffic, slo)
    except (ConfigError, ValueError, OSError) as e:
        print(f"edgeserve sim replicas-tp: {e}", file=sys.stderr)
        return 2
    print(format_answer(a))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "replicas_tp.json").write_text(json.dumps(to_json(a), indent=1))
        print(f"wrote {args.out / 'replicas_tp.json'}")
        print(f"wrote {plot_answer(a, args.out / 'replicas_tp.png')}")
    return 0
