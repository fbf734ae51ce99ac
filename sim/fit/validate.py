"""How far the simulator is from the runtime on a run it was not fitted on.

``edgeserve calibrate validate PROFILE HELDOUT.jsonl`` replays the held-out trace's arrivals and
sizes (image size, text tokens, output tokens) through one simulated device with the calibrated
profile, every request local, and sets the simulated requests beside the measured ones:

* TTFT, TPOT, ITL and E2E — mean, p50, p90, p99 — with the relative error of each;
* throughput (completed requests per second of the run);
* the mean time of each stage (preprocessing queue, decode, resize, normalize, engine queue,
  generation) and the stall fraction (the time the engine sat idle while a request was in a CPU
  stage, over the run's span);
* measured-vs-simulated CDFs of TTFT and E2E (PNG);
* beside each measured latency figure, its own 95 % interval (a block bootstrap over arrival
  time, :mod:`sim.fit.bootstrap`): an error whose simulated figure lies inside it is no larger than
  what another run of the same load could have shown;
* with several seeds, the *simulator's own spread* of each figure: the range the figure takes
  over the seeds' replays, one replay of every held-out run per seed, as one measurement of those
  runs would be taken. It holds what one recording cannot see — the machine's drift between
  fresh servers, as fitted — so a measured figure outside it is one the model did not expect
  from a measurement of that size, and one inside it is not evidence against the model.

A profile is trusted as far as these errors go; docs/sim.md quotes them for held-out runs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.records import CPU_STAGES, Outcome, RequestRecord, Stage, read_trace, stage_spans
from sim.fit.bootstrap import block_intervals
from sim.fit.prediction import DRAWS, LEVEL, predict
from sim.scenario.fitted_range import Extrapolation, FittedRange
from sim.scenario.schema import build

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
BLOCK_S = 10.0  # bootstrap block: longer than the machine's drift and a queue's life
SPREAD_MIN_SEEDS = 5  # seeds below which the simulator's spread of a figure is not reported


@dataclass(slots=True)
class Side:
    """One side of the comparison: latency samples and stage means of completed requests."""

    samples: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})
    # per sample: its request's arrival and which pooled run it came from (the block bootstrap's
    # blocks are cut from these)
    arrival_s: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})
    run: dict[str, list[int]] = field(default_factory=lambda: {m: [] for m in METRICS})
    runs: int = 1
    stage_s: dict[str, list[float]] = field(default_factory=dict)
    completed: int = 0
    first_arrival_s: float = math.inf
    last_finish_s: float = -math.inf
    stall_s: float = 0.0

    def add(self, r: RequestRecord) -> None:
        self.first_arrival_s = min(self.first_arrival_s, r.arrived_s)
        if r.outcome is not Outcome.OK or r.finished_s is None:
            return
        self.completed += 1
        self.last_finish_s = max(self.last_finish_s, r.finished_s)
        for name, v in (("ttft", r.ttft_s), ("tpot", r.tpot_s), ("e2e", r.e2e_s)):
            if v is not None:
                self._sample(name, [v], r.arrived_s)
        itl = r.itl_s()
        if itl:
            self._sample("itl", itl, r.arrived_s)
        elif r.tpot_s is not None:  # a batch engine spaces tokens evenly: its ITL is its TPOT
            self._sample("itl", [r.tpot_s] * (r.output_tokens - 1), r.arrived_s)
        for stage, a, b in stage_spans(r):
            self.stage_s.setdefault(stage.value, []).append(b - a)

    def _sample(self, metric: str, xs: list[float], arrived_s: float) -> None:
        self.samples[metric].extend(xs)
        self.arrival_s[metric].extend([arrived_s] * len(xs))
        self.run[metric].extend([self.runs - 1] * len(xs))

    pooled_span_s: float = 0.0  # Σ of the pooled runs' spans (0: one run)

    @property
    def span_s(self) -> float:
        return self.pooled_span_s or self.last_finish_s - self.first_arrival_s

    def pool(self, other: Side) -> None:
        """Add another run of the same trace (another seed): samples pooled, spans summed, so
        throughput is the runs' total completions over their total time."""
        span = self.span_s if self.completed else 0.0
        for m, xs in other.samples.items():
            self.samples[m].extend(xs)
            self.arrival_s[m].extend(other.arrival_s[m])
            self.run[m].extend(k + self.runs for k in other.run[m])
        self.runs += other.runs
        for st, xs in other.stage_s.items():
            self.stage_s.setdefault(st, []).extend(xs)
        self.completed += other.completed
        self.pooled_span_s = span + other.span_s

    @property
    def throughput_rps(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else 0.0

    def stat(self, metric: str, which: str) -> float | None:
        xs = self.samples[metric]
        if not xs:
            return None
        return float(_stats(np.asarray(xs), (which,))[0])

    def intervals(self, metric: str, *, block_s: float = BLOCK_S,
                  resamples: int = 1000) -> dict[str, tuple[float, float]]:
        """95 % block-bootstrap interval of each of STATS of ``metric`` (:mod:`sim.fit.bootstrap`):
        how far this side's own figure could have fallen on another run of the same load."""
        iv = block_intervals(self.samples[metric], self.arrival_s[metric], self.run[metric],
                             lambda x: _stats(x, STATS), block_s=block_s, resamples=resamples)
        return {} if iv is None else dict(zip(STATS, iv, strict=True))


def _stats(xs: np.ndarray, which: tuple[str, ...]) -> list[float]:
    pct = [float(w[1:]) for w in which if w != "mean"]
    qs = iter(np.percentile(xs, pct) if pct else [])
    return [float(np.mean(xs)) if w == "mean" else float(next(qs)) for w in which]


def stall_seconds(recs: list[RequestRecord]) -> float:
    """Engine idle time while some completed request sat in a CPU stage (union of intervals).

    The engine counts as busy from a request's engine queueing to its last token."""
    busy = sorted((r.engine_queued_s, r.last_token_s) for r in recs
                  if r.engine_queued_s is not None and r.last_token_s is not None)
    cpu = sorted((a, b) for r in recs for s, a, b in stage_spans(r) if s in CPU_STAGES)
    return max(0.0, _union(cpu) - _overlap(_merge(cpu), _merge(busy)))


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _union(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _merge(iv))


def _overlap(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            total += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(slots=True)
class Validation:
    measured: Side
    simulated: Side
    trace: str
    profile: str
    measured_stall_s: float = 0.0
    simulated_stall_s: float = 0.0
    # held-out requests whose sizes lie outside those the profile was fitted on
    extrapolations: list[Extrapolation] = field(default_factory=list)
    # the simulated side of each seed alone (every run's replay with that seed, pooled)
    seed_sides: list[Side] = field(default_factory=list)
    # "ttft p50" → its 90 % prediction interval from profiles drawn from the calibration's
    # uncertainty (prediction_intervals; empty: not computed)
    prediction: dict[str, tuple[float, float]] = field(default_factory=dict)
    _intervals: dict[str, tuple[float, float]] | None = field(default=None, repr=False)
    _spread: dict[str, tuple[float, float]] | None = field(default=None, repr=False)

    def rows(self) -> list[tuple[str, float | None, float | None, float | None]]:
        """(quantity, measured, simulated, relative error) — latencies in seconds."""
        out: list[tuple[str, float | None, float | None, float | None]] = []
        for m in METRICS:
            for w in STATS:
                a, b = self.measured.stat(m, w), self.simulated.stat(m, w)
                out.append((f"{m} {w}", a, b, rel(a, b)))
        a, b = self.measured.throughput_rps, self.simulated.throughput_rps
        out.append(("throughput req/s", a, b, rel(a, b)))
        for st in Stage:
            ma, sb = self.measured.stage_s.get(st.value), self.simulated.stage_s.get(st.value)
            if ma or sb:
                a = float(np.mean(ma)) if ma else None
                b = float(np.mean(sb)) if sb else None
                out.append((f"stage {st.value} mean", a, b, rel(a, b)))
        fa = self.measured_stall_s / self.measured.span_s if self.measured.span_s > 0 else 0.0
        fb = self.simulated_stall_s / self.simulated.span_s if self.simulated.span_s > 0 else 0.0
        out.append(("stall fraction", fa, fb, rel(fa, fb)))
        return out

    def measured_intervals(self) -> dict[str, tuple[float, float]]:
        """"ttft p99" → the measured figure's 95 % block-bootstrap interval (seconds), for every
        latency statistic the measured side has enough blocks for; computed once."""
        if self._intervals is None:
            self._intervals = {f"{m} {w}": iv for m in METRICS
                               for w, iv in self.measured.intervals(m).items()}
        return self._intervals

    def simulated_spread(self) -> dict[str, tuple[float, float]]:
        """"ttft p99" → the 2.5–97.5 % range of that figure over the seeds' replays (each seed
        one replay of every run, pooled like the measured side), and "throughput req/s" likewise;
        empty with fewer than :data:`SPREAD_MIN_SEEDS` seeds; computed once."""
        if self._spread is None:
            self._spread = self._seed_ranges() if len(self.seed_sides) >= SPREAD_MIN_SEEDS else {}
        return self._spread

    def _seed_ranges(self) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for m in METRICS:
            for w in STATS:
                xs = [x for x in (side.stat(m, w) for side in self.seed_sides) if x is not None]
                if len(xs) >= SPREAD_MIN_SEEDS:
                    lo, hi = np.percentile(xs, [2.5, 97.5])
                    out[f"{m} {w}"] = (float(lo), float(hi))
        lo, hi = np.percentile([side.throughput_rps for side in self.seed_sides], [2.5, 97.5])
        out["throughput req/s"] = (float(lo), float(hi))
        return out

    def as_dict(self) -> dict[str, Any]:
        ivs = self.measured_intervals()
        spread = self.simulated_spread()
        rows = []
        for q, a, b, e in self.rows():
            row: dict[str, Any] = {"quantity": q, "measured": a, "simulated": b, "rel_error": e}
            if q in ivs:
                row["measured_interval"] = list(ivs[q])
                row["inside_interval"] = b is not None and ivs[q][0] <= b <= ivs[q][1]
            if q in spread:
                row["simulated_spread"] = list(spread[q])
                row["measured_inside_spread"] = a is not None and spread[q][0] <= a <= spread[q][1]
            if q in self.prediction:
                lo, hi = self.prediction[q]
                row["prediction_interval"] = [lo, hi]
                row["measured_inside_prediction"] = a is not None and lo <= a <= hi
            rows.append(row)
        return {"trace": self.trace, "profile": self.profile,
                "measured_requests": self.measured.completed,
                "simulated_requests": self.simulated.completed,
                "interval": f"95 % block bootstrap of the measured requests, {BLOCK_S:g} s blocks",
                "simulated_spread": (f"2.5–97.5 % of the figure over {len(self.seed_sides)} "
                                     f"seeds' replays of all runs" if spread else None),
                "outside_fitted_range": [x.as_dict() for x in self.extrapolations],
                "rows": rows}

    def figures_json(self) -> dict[str, dict[str, Any]]:
        """``{"ttft_p50": {"measured": …, "simulated": …, "interval": [lo, hi]}, …}`` in
        seconds, every latency figure (``interval`` null without a prediction)."""
        out: dict[str, dict[str, Any]] = {}
        for m in METRICS:
            for w in STATS:
                iv = self.prediction.get(f"{m} {w}")
                out[f"{m}_{w}"] = {"measured": self.measured.stat(m, w),
                                   "simulated": self.simulated.stat(m, w),
                                   "interval": None if iv is None else list(iv)}
        return out

    def format(self) -> str:
        ivs = self.measured_intervals()
        spread = self.simulated_spread()
        pw = 34 if self.prediction else 0  # the prediction column, beside the point estimate
        lines = [f"held-out trace {self.trace}: {self.measured.completed} measured, "
                 f"{self.simulated.completed} simulated requests (profile {self.profile})",
                 f"{'':24s} {'measured':>11s} {'simulated':>11s} {'error':>8s}"
                 + (f"   {f'{LEVEL * 100:.0f} % prediction':{pw}s}" if pw else "")
                 + f"   {'measured own 95 %':24s}"
                 + (f" simulated spread ({len(self.seed_sides)} seeds)" if spread else ""),
                 f"{'':24s} {'':>11s} {'':>11s} {'':>8s}"
                 + (f"   {'(drawn profiles and seeds)':{pw}s}" if pw else "")
                 + f"   {f'(block bootstrap, {BLOCK_S:g} s)':24s}"
                 + (" (as % of the measured)" if spread else "")]
        for q, a, b, e in self.rows():
            scale, unit = (1e3, " ms") if q.split()[0] in METRICS or q.startswith("stage") else (1, "")
            fa = "—" if a is None else f"{a * scale:.4g}{unit}"
            fb = "—" if b is None else f"{b * scale:.4g}{unit}"
            fe = "—" if e is None else f"{e * 100:+.1f} %"
            fi = interval_text(a, b, ivs.get(q), "{lo} … {hi} %{inside}", " (in)")
            fs = spread_text(a, spread.get(q))
            line = f"{q:24s} {fa:>11s} {fb:>11s} {fe:>8s}"
            if pw:
                line += f"   {prediction_text(a, self.prediction.get(q), scale, unit):{pw}s}"
            if fi or fs:
                line += f"   {fi:24s} {fs}".rstrip()
            lines.append(line)
        lines += [f"note: {x.text()}" for x in self.extrapolations]
        return "\n".join(lines)


def prediction_text(measured: float | None, iv: tuple[float, float] | None, scale: float,
                    unit: str) -> str:
    """A prediction interval in the figure's unit, and "(holds it)" when the measured figure lies
    inside; "" without one."""
    if iv is None:
        return ""
    inside = measured is not None and iv[0] <= measured <= iv[1]
    return f"{iv[0] * scale:.4g} … {iv[1] * scale:.4g}{unit}" + (" (holds it)" if inside else "")


def interval_text(measured: float | None, simulated: float | None,
                  iv: tuple[float, float] | None, template: str, inside: str) -> str:
    """A measured figure's interval as percentages of it, filled into ``template`` (fields
    ``lo``, ``hi``, ``inside``: the ``inside`` text when the simulated figure lies in it);
    "" without an interval."""
    if iv is None or not measured:
        return ""
    lo, hi = iv
    within = simulated is not None and lo <= simulated <= hi
    return template.format(lo=f"{(lo / measured - 1) * 100:+.1f}",
                           hi=f"{(hi / measured - 1) * 100:+.1f}", inside=inside if within else "")


def spread_text(measured: float | None, spread: tuple[float, float] | None) -> str:
    """The simulator's spread of a figure as percentages of the measured figure, and "(holds
    it)" when the measured figure lies inside; "" without a spread."""
    return interval_text(measured, measured, spread, "{lo} … {hi} %{inside}", " (holds it)")


def rel(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated is None or measured == 0:
        return None
    return (simulated - measured) / measured


def extrapolations(profile: dict[str, Any], records: list[RequestRecord]) -> list[Extrapolation]:
    """Which sizes of ``records`` lie outside the profile's ``fitted_range`` (none without one)."""
    raw = profile.get("fitted_range")
    if not raw:
        return []
    return build(FittedRange, raw, "fitted_range").outside(records)


def local_records(path: str | Path) -> list[RequestRecord]:
    return [r for r in read_trace(path) if isinstance(r, RequestRecord) and r.uplink_end_s is None]


def replay_scenario(profile: dict[str, Any], trace: str | Path, span_s: float,
                    seed: int = 1) -> dict[str, Any]:
    """One device with ``profile``, the trace's arrivals, every request local."""
    return {"name": "validate", "seed": seed, "duration_s": span_s + 1.0,
            "sample_interval_s": max(1.0, span_s / 200), "slo": {"e2e_s": 10.0},
            "policy": {"kind": "always_local"},
            "devices": [{"name": "measured", "profile": profile,
                         "workload": {"kind": "replay", "trace": str(trace)}}]}


def replay(profile: dict[str, Any], trace: str | Path, seed: int,
           measured: list[RequestRecord] | None = None) -> tuple[Side, list[RequestRecord]]:
    """One replay of ``trace``'s arrivals through ``profile``: the simulated side and records
    (``measured``: the trace's local records, when already read)."""
    from sim.core.simulation import Simulation
    from sim.scenario.config import scenario_from_raw

    measured = local_records(trace) if measured is None else measured
    if not measured:
        raise ValueError(f"{trace} holds no local request records to replay")
    span = max((r.finished_s or r.arrived_s) for r in measured) - min(r.arrived_s for r in measured)
    sim = Simulation(scenario_from_raw(replay_scenario(profile, trace, span, seed), None, []))
    sim.record_token_times()  # a step engine's ITLs are its step gaps, as measured
    simulated: list[RequestRecord] = []
    sim.add_record_sink(simulated.append)
    sim.run()
    side = Side()
    for r in simulated:
        side.add(r)
    return side, simulated


def figures(side: Side) -> dict[str, float | None]:
    """"ttft p50" → the side's figure (seconds), for every latency metric and statistic."""
    return {f"{m} {w}": side.stat(m, w) for m in METRICS for w in STATS}


def prediction_intervals(profile: dict[str, Any], traces: Sequence[str | Path], *,
                         draws: int = DRAWS, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Each latency figure's 90 % prediction interval for the held-out ``traces`` taken together
    (each its own server): ``draws`` profiles drawn from ``profile``'s uncertainty
    (:mod:`sim.fit.prediction`), every trace replayed through its server's draw, pooled."""
    measured = [local_records(t) for t in traces]

    def run(profiles: list[dict[str, Any]], k: int) -> dict[str, float | None]:
        pooled: Side | None = None
        for p, t, recs in zip(profiles, traces, measured, strict=True):
            side, _ = replay(p, t, k, recs)
            if pooled is None:
                pooled = side
            else:
                pooled.pool(side)
        return figures(pooled) if pooled is not None else {}

    return predict(profile, run, servers=len(traces), draws=draws, seed=seed)


def validate(profile: dict[str, Any], trace: str | Path, *, profile_name: str = "",
             seed: int = 1, seeds: int = 1) -> tuple[Validation, list[RequestRecord]]:
    """Replay ``trace`` through ``profile``; returns the comparison and the simulated records
    (of the first seed). With ``seeds > 1`` the simulated side pools that many replays with
    seeds ``seed, seed + 1, …``, so its percentiles carry less of one seed's luck."""
    v, first, _ = _validate(profile, trace, profile_name=profile_name, seed=seed, seeds=seeds)
    return v, first


def _validate(profile: dict[str, Any], trace: str | Path, *, profile_name: str, seed: int,
              seeds: int) -> tuple[Validation, list[RequestRecord], list[RequestRecord]]:
    """:func:`validate`, also returning the measured records it read."""
    measured = local_records(trace)
    if not measured:
        raise ValueError(f"{trace} holds no local request records to replay")
    v = Validation(Side(), Side(), str(trace), profile_name)
    first: list[RequestRecord] = []
    for k in range(seeds):
        side, simulated = replay(profile, trace, seed + k, measured)
        v.seed_sides.append(copy.deepcopy(side))
        v.simulated_stall_s += stall_seconds([r for r in simulated if r.outcome is Outcome.OK])
        if k == 0:
            v.simulated, first = side, simulated
        else:
            v.simulated.pool(side)
    for r in measured:
        v.measured.add(r)
    v.measured_stall_s = stall_seconds([r for r in measured if r.outcome is Outcome.OK])
    v.extrapolations = extrapolations(profile, measured)
    return v, first, measured


def validate_runs(profile: dict[str, Any], traces: Sequence[str | Path], *,
                  profile_name: str = "", seeds: int = 1,
                  trace_profiles: list[dict[str, Any]] | None = None) -> Validation:
    """:func:`validate` over several held-out runs of one kind, pooled on both sides: the measured
    requests of every trace, and ``seeds`` replays of each trace's arrivals; throughput is the
    total completions over the total span. A percentile then rests on all the runs' requests.
    ``trace_profiles``: one profile per trace to replay it through instead of ``profile`` (its
    server's own speed level, :mod:`sim.fit.speed_level`); ``profile`` still gives the fitted range."""
    if trace_profiles is not None and len(trace_profiles) != len(traces):
        raise ValueError(f"{len(trace_profiles)} trace profiles for {len(traces)} traces")
    pooled: Validation | None = None
    measured: list[RequestRecord] = []
    for i, t in enumerate(traces):
        own = profile if trace_profiles is None else trace_profiles[i]
        v, _, recs = _validate(own, t, profile_name=profile_name, seed=1, seeds=seeds)
        measured += recs
        if pooled is None:
            pooled = v
            continue
        pooled.measured.pool(v.measured)
        pooled.simulated.pool(v.simulated)
        for mine, theirs in zip(pooled.seed_sides, v.seed_sides, strict=True):
            mine.pool(theirs)
        pooled.measured_stall_s += v.measured_stall_s
        pooled.simulated_stall_s += v.simulated_stall_s
        pooled.trace += f" + {Path(t).name}"
    if pooled is None:
        raise ValueError("validate_runs needs at least one trace")
    pooled.extrapolations = extrapolations(profile, measured)
    return pooled
