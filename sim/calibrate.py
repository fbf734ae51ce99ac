"""Fit a device profile's service-time models from recorded runtime traces.

A trace of ``edgeserve serve --trace`` holds, per request, the stage timestamps and sizes of
:class:`edgeserve.records.RequestRecord`. Each stage's duration is regressed on the features the
simulator's models use (ordinary least squares, coefficients kept non-negative):

==============  ===========================================  ==============================
stage           duration from the record                     features
==============  ===========================================  ==============================
image_decode    ``decode_end_s − preproc_start_s``           source pixels, decoded pixels
resize          ``resize_end_s − decode_end_s``              decoded pixels, target pixels
normalize       ``normalize_end_s − resize_end_s``           target pixels
encode          ``encode_end_s − normalize_end_s``           image tokens
prefill         ``first_token_s − engine_queued_s``          prompt tokens
decode_step     ``(last − first token) / (output − 1)``      requests decoding at once
==============  ===========================================  ==============================

*Decoded* pixels are what the decoder produced: a JPEG much larger than its target is decoded at
1/2…1/8 scale in the DCT domain, so decode costs a little per source pixel (entropy decoding) and
more per decoded pixel, and the resize starts from the decoded image. A calibration run whose
images span sizes on both sides of the downscale thresholds separates the two terms.

Queueing must not leak into service times. The CPU stages are measured inside a worker, so they
are clean. For prefill only requests that found the engine empty are used (no other request
between its own queueing and its first token). For the decode step only requests whose decode
window saw no other request's first token (no prefill pausing the batch) are used. The batch
size of a window is the mean number of requests decoding *per step* (time segments weighted by
1/step time, iterated with the fit), which makes the window's mean step time exactly linear in it.

The spread around the fitted mean becomes a lognormal ``cv`` (the standard deviation of the ratio
of measured to fitted time), or ``deterministic`` when it is below 0.5 %.

**Engine steps.** A trace of a current runtime also holds one :class:`~edgeserve.records.EngineStep`
per vLLM step. Those fit the step engine's time model directly — no queueing to remove, because a
step's duration is its own:

    step_s ≈ base_s + a·prefill_tokens + b·decode_tokens + c·context_tokens + d·encoder_tokens
             + e·encoder_tokens²

(``context_tokens`` = the KV held after the step, ``kv_cache_usage × kv_cache_tokens`` of the
header; a hybrid model's state blocks left out, :mod:`sim.engine_kv`). The header also gives
the engine's limits (``max_num_seqs``, ``max_num_batched_tokens``, block size, KV tokens) and the host's cores, which the profile takes over: the profile
describes the machine that was measured, whatever ``--base`` said. Steps that overlapped a busy
preprocessing worker were slower than the model: the extra step time per second of worker
activity during the step (``κ``) goes into ``host.step_extra_s_per_worker_s``; the median hand-off from the end of preprocessing to the
engine into ``llm.handoff_s``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeserve.records import EngineStep, Outcome, RequestRecord, TraceHeader, read_trace
from sim.engine_kv import KVCache, context_tokens, kv_cache
from sim.fitted_range import FittedRange, span
from sim.profiles import STEP_FEATURES as PROFILE_STEP_FEATURES
from sim.workload import decoded_pixels

MIN_SAMPLES = 5


@dataclass(slots=True)
class StageFit:
    stage: str
    n: int
    base_s: float
    per: dict[str, float]
    cv: float
    r2: float
    note: str = ""

    def model(self) -> dict[str, Any]:
        m: dict[str, Any] = {"kind": "lognormal" if self.cv >= 0.005 else "deterministic",
                             "base_s": float(f"{self.base_s:.6g}"),
                             "per": {k: float(f"{v:.6g}") for k, v in self.per.items()}}
        if m["kind"] == "lognormal":
            m["cv"] = round(self.cv, 4)
        return m


@dataclass(slots=True)
class Calibration:
    fits: dict[str, StageFit] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage → why not fitted
    requests: int = 0
    workers: int = 0
    has_encode: bool = False  # some record has an encoder stage
    step: StageFit | None = None  # the engine's step-time model, from step records
    steps: int = 0
    engine: dict[str, Any] = field(default_factory=dict)  # limits from the trace header
    host_cores: int = 0
    engine_threads: int = 0  # cores the engine's model worker may run on
    contention: float = 0.0  # extra step seconds per second a worker was busy during it (κ)
    contention_n: int = 0
    step_gap_s: float = 0.0  # idle time between back-to-back engine steps (before a decode step)
    step_gap_per: dict[str, float] = field(default_factory=dict)  # its growth per step feature
    handoff_s: float = 0.0  # median time from the end of preprocessing to the engine
    handoff_n: int = 0
    input_processing: StageFit | None = None  # vLLM's processing before a request is schedulable
    cold_factor: float = 0.0  # extra time of a step running a shape first (cold_shape_factor)
    cold_n: int = 0
    drift_sd: float = 0.0  # the machine's slow drift of step times (see fit_drift)
    drift_tau_s: float = 0.0
    drift_start: float = 0.0  # log slowdown of a fresh server's first steps
    admission: dict[str, int] = field(default_factory=dict)
    encode_in_worker: bool = False  # the runtime's encoder (--encoder onnx) ran in the workers
    # the sizes fitted on (image tokens, pixels, prompt tokens): where the models interpolate
    fitted_range: FittedRange = field(default_factory=FittedRange)

    def step_gap_before(self, s: EngineStep) -> float:
        """The fitted idle time before step ``s`` (:func:`fit_step_gap`), which the step model's
        coefficients include and vLLM's own step time does not."""
        return self.step_gap_s + sum(g * getattr(s, f) for f, g in self.step_gap_per.items())


STEP_FEATURES = list(PROFILE_STEP_FEATURES)  # the step model's terms, in the profile's order


def encoder_square_sum(encoder_tokens: int, image_sizes: tuple[int, ...]) -> float:
    """Σ tokens² over the images a step encoded, from the step's total: vLLM reports one sum, so
    it is split into the fewest images of the trace's sizes (``image_sizes``; at most four) that
    add up to it — 1839 = 1230 + 609 is two images, not one of 1839 tokens. Without a split the
    total counts as one image."""
    if encoder_tokens <= 0:
        return 0.0
    return _square_sum(encoder_tokens, image_sizes)


@functools.lru_cache(maxsize=4096)
def _square_sum(total: int, sizes: tuple[int, ...]) -> float:
    return float(sum(c * c for c in split_images(total, sizes)))


@functools.lru_cache(maxsize=4096)
def split_images(total: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The images (token counts) a step's ``total`` encoder tokens came from: the fewest of the
    trace's ``sizes`` that add up to it (at most four; of those, the least Σ²); ``(total,)``
    when none do."""
    best: tuple[int, ...] | None = None
    for k in range(1, 5):
        for combo in itertools.combinations_with_replacement(sizes, k):
            if sum(combo) == total and (best is None or sum(c * c for c in combo)
                                        < sum(c * c for c in best)):
                best = combo
        if best is not None:
            return best
    return (total,)


def cold_steps(steps: list[EngineStep], runs: list[tuple[int, int]],
               sizes: tuple[int, ...] = ()) -> set[int]:
    """Indices (into ``steps``) of the steps that ran a shape for the first time on their server:
    a prefill-token count or an image size (:func:`split_images`) not seen before in the same
    run (``runs``: each trace's ``[start, end)`` in ``steps``) — the simulator's
    ``cold_shape_factor`` rule."""
    cold: set[int] = set()
    for a, b in runs:
        seen: set[int] = set()
        for i in sorted(range(a, b), key=lambda k: steps[k].t_s):
            s = steps[i]
            keys = [-n for n in split_images(s.encoder_tokens, sizes)] if s.encoder_tokens > 0 else []
            if s.prefill_tokens > 0:
                keys.append(s.prefill_tokens)
            if any(k not in seen for k in keys):
                cold.add(i)
            seen.update(keys)
    return cold


def step_features(s: EngineStep, kv_cache_tokens: KVCache,
                  image_sizes: tuple[int, ...] = ()) -> tuple[float, ...]:
    """A step's features in :data:`STEP_FEATURES` order (see :func:`encoder_square_sum`)."""
    sq = encoder_square_sum(s.encoder_tokens, image_sizes)
    ctx = context_tokens(s, kv_cache_tokens)
    others = max(0.0, ctx - s.prefill_tokens)
    return (s.prefill_tokens, s.decode_tokens, ctx,
            s.encoder_tokens, sq, float(s.encoder_tokens) ** 2 - sq, s.prefill_tokens * others)


def step_prediction(fit: StageFit, s: EngineStep, kv_cache_tokens: KVCache,
                    sizes: tuple[int, ...] = ()) -> float:
    """The step model's time for step ``s`` (no contention, no noise)."""
    return fit.base_s + sum(fit.per.get(k, 0.0) * v for k, v in zip(
        STEP_FEATURES, step_features(s, kv_cache_tokens, sizes), strict=True))


def fit_steps(steps: Iterable[EngineStep], kv_cache_tokens: KVCache = 0,
              image_sizes: tuple[int, ...] = (), embeds: bool = False) -> StageFit | None:
    """The step-time model from per-step records (``None`` with fewer than MIN_SAMPLES steps).

    The coefficients minimise *relative* errors (least squares weighted by 1/ŷ of a first,
    unweighted pass, twice): step times span 2 ms decode steps to 300 ms encoder steps, and
    seconds-weighted least squares let the largest steps set the slope, so a 600-token image's
    step came out 20 % too long and a two-image step 15 % too short — and waiting times grow
    with the second moment of the step times, which that misfit shrinks.

    Its ``cv`` is the spread *weighted by step time* (√(Σ residual² / Σ fitted²)): a 2 ms decode
    step that took 4 ms says little about how a 300 ms encoder step varies, while an unweighted
    spread of ratios would let the many short steps set the noise of the long ones.

    ``embeds``: the engine was handed image embeddings (``--encoder onnx``), so its steps ran no
    vision tower — whatever vLLM counts as encoder tokens then costs nothing to encode, and the
    encoder terms are left out (zero) instead of soaking up prefill time."""
    rows = [(s.duration_s, *step_features(s, kv_cache_tokens, image_sizes))
            for s in steps if s.duration_s > 0]
    if embeds:
        rows = [(*r[:4], 0.0, 0.0, 0.0, *r[7:]) for r in rows]
    if len(rows) < MIN_SAMPLES:
        return None
    arr = np.asarray(rows, dtype=float)

    def predict(f: StageFit) -> np.ndarray:
        coef = np.asarray([f.per.get(k, 0.0) for k in STEP_FEATURES])
        return np.asarray(f.base_s + arr[:, 1:] @ coef)

    fit = fit_linear("step", arr[:, 1:], arr[:, 0], STEP_FEATURES)
    for _ in range(2):
        floor = max(float(np.median(arr[:, 0])) * 0.1, 1e-6)
        fit = fit_linear("step", arr[:, 1:], arr[:, 0], STEP_FEATURES,
                         weights=1.0 / np.maximum(predict(fit), floor))
    pred = predict(fit)
    ss_tot = float(np.sum((arr[:, 0] - arr[:, 0].mean()) ** 2))
    fit.r2 = 1 - float(np.sum((arr[:, 0] - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    fit.cv = float(np.sqrt(np.sum((arr[:, 0] - pred) ** 2) / np.sum(pred ** 2)))
    return fit


def image_sizes(records: Iterable[RequestRecord]) -> tuple[int, ...]:
    """The image-token counts of the trace's one-image requests (distinct, sorted)."""
    return tuple(sorted({r.image_tokens for r in records if r.num_images == 1 and r.image_tokens}))


def worker_encoder(meta: dict[str, Any]) -> bool:
    """Whether a runtime trace's header says the vision encoder ran in the preprocessing workers
    (``edgeserve serve --encoder onnx``: ``meta.encoder.kind`` is ``onnx``) and the engine was
    handed image embeddings."""
    enc = meta.get("encoder")
    return isinstance(enc, dict) and str(enc.get("kind", "none")) not in ("", "none")


ENCODE_FEATURES = ["image_tokens", "image_tokens_sq"]


def fit_worker_encode(records: Iterable[RequestRecord]) -> StageFit | None:
    """The worker-side encoder's service model, ``encode_end_s − normalize_end_s`` regressed on
    image tokens and image tokens² (the tower's attention runs over all of an image's patches).

    The encoder runs in the worker that has just patchified the image, right after it, so the
    duration has no queueing in it and every one-image request counts (a request whose images went
    to several workers has one span for all of them and is left out)."""
    rows = [(float(r.encode_end_s) - float(r.normalize_end_s), r.image_tokens,
             float(r.image_tokens) ** 2)
            for r in records if r.outcome is Outcome.OK and r.num_images == 1 and r.image_tokens
            and r.encode_end_s is not None and r.normalize_end_s is not None]
    rows = [r for r in rows if r[0] >= 0 and math.isfinite(r[0])]
    if len(rows) < MIN_SAMPLES:
        return None
    arr = np.asarray(rows, dtype=float)
    fit = fit_linear("encode", arr[:, 1:], arr[:, 0], ENCODE_FEATURES)
    fit.note = (f"in the preprocessing workers, {len(rows)} one-image requests; the engine got "
                "image embeddings, so its steps have no encoder terms")
    return fit


def worker_busy_through_encode(recs: Iterable[RequestRecord]) -> dict[int, Intervals]:
    """:func:`worker_busy` when the encoder runs in the workers: busy until the encode ends."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for r in recs:
        end = r.encode_end_s if r.encode_end_s is not None else r.normalize_end_s
        if r.worker is not None and r.preproc_start_s is not None and end is not None:
            spans.setdefault(r.worker, []).append((r.preproc_start_s, end))
    return {w: Intervals(v) for w, v in spans.items()}


@dataclass(slots=True)
class TraceData:
    """What calibration reads from traces: request records, engine steps, header facts."""

    records: list[RequestRecord] = field(default_factory=list)
    steps: list[EngineStep] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # the last runtime header's meta
    runs: list[tuple[int, int]] = field(default_factory=list)  # each trace's [start, end) in steps


def read_traces(paths: Iterable[str | Path]) -> TraceData:
    data = TraceData()
    for p in paths:
        first = len(data.steps)
        warm_until_s = float("-inf")  # a server's warm-up steps are not the traffic's
        for item in read_trace(p):
            if isinstance(item, RequestRecord):
                data.records.append(item)
            elif isinstance(item, EngineStep):
                if item.t_s > warm_until_s:
                    data.steps.append(item)
            elif isinstance(item, TraceHeader) and item.producer == "edgeserve serve":
                data.meta = dict(item.meta)
                warmup = data.meta.get("warmup")
                if isinstance(warmup, dict):
                    warm_until_s = float(warmup["end_t_s"])
        data.runs.append((first, len(data.steps)))
    return data


def fit_linear(stage: str, x: np.ndarray, y: np.ndarray, names: list[str],
               weights: np.ndarray | None = None) -> StageFit:
    """Least squares ``y ≈ b + x·w`` with ``b, w ≥ 0`` (negative terms are dropped and refitted);
    ``weights`` scale each row's residual (``1/ŷ``: relative errors count, not seconds)."""
    keep = list(range(len(names)))
    w = np.ones(len(y)) if weights is None else weights
    while True:
        a = np.column_stack([np.ones(len(y))] + [x[:, i] for i in keep])
        coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        neg = [j for j, c in enumerate(coef[1:]) if c < 0]
        if not neg:
            break
        keep.pop(neg[0])
    base = float(coef[0])
    if base < 0:  # refit through the origin
        a0 = np.column_stack([x[:, i] for i in keep]) if keep else np.zeros((len(y), 0))
        coef0, *_ = np.linalg.lstsq(a0 * w[:, None], y * w, rcond=None) if keep else (np.zeros(0),)
        coef = np.concatenate([[0.0], np.maximum(coef0, 0.0)])
        base = 0.0
        a = np.column_stack([np.ones(len(y))] + [x[:, i] for i in keep])
    pred = a @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ratio = y / np.where(pred > 0, pred, np.nan)
    cv = float(np.nanstd(ratio)) if len(y) > 1 else 0.0
    per = {names[i]: float(c) for i, c in zip(keep, coef[1:], strict=True) if c > 0}
    return StageFit(stage, len(y), base, per, cv, 1 - ss_res / ss_tot if ss_tot > 0 else 1.0)


def _stage(cal: Calibration, stage: str, rows: list[tuple[float, ...]], names: list[str]) -> None:
    rows = [r for r in rows if r[0] >= 0 and all(math.isfinite(v) for v in r)]
    if len(rows) < MIN_SAMPLES:
        cal.skipped[stage] = f"{len(rows)} usable records (need {MIN_SAMPLES})"
        return
    arr = np.asarray(rows, dtype=float)
    cal.fits[stage] = fit_linear(stage, arr[:, 1:], arr[:, 0], names)


class _Concurrency:
    """Number of requests decoding (between first and last token) as a step function of time."""

    def __init__(self, recs: list[RequestRecord]) -> None:
        deltas: dict[float, int] = {}
        for r in recs:
            a, b = float(r.first_token_s or 0.0), float(r.last_token_s or 0.0)
            deltas[a] = deltas.get(a, 0) + 1
            deltas[b] = deltas.get(b, 0) - 1
        self.t = sorted(deltas)
        self.level: list[int] = []
        n = 0
        for t in self.t:
            n += deltas[t]
            self.level.append(n)
        self._prefix: list[float] = []
        self._weight = lambda b: 1.0

    def weigh(self, weight: Any) -> None:
        """Prepare integrals of ``weight(level)`` and ``level · weight(level)`` over time."""
        self._weight = weight
        w_sum, bw_sum = [0.0], [0.0]
        for i in range(len(self.t) - 1):
            dt = self.t[i + 1] - self.t[i]
            w = weight(self.level[i]) if self.level[i] > 0 else 0.0
            w_sum.append(w_sum[-1] + w * dt)
            bw_sum.append(bw_sum[-1] + self.level[i] * w * dt)
        self._prefix = [w_sum, bw_sum]  # type: ignore[list-item]

    def _integral(self, k: int, t: float) -> float:
        i = bisect.bisect_right(self.t, t) - 1
        if i < 0:
            return 0.0
        lv = self.level[i]
        w = self._weight(lv) if lv > 0 else 0.0
        return self._prefix[k][i] + (lv * w if k else w) * (t - self.t[i])  # type: ignore[index]

    def mean(self, a: float, b: float) -> float:
        """Weighted mean level over [a, b]: ∫ level·w dt / ∫ w dt."""
        den = self._integral(0, b) - self._integral(0, a)
        return (self._integral(1, b) - self._integral(1, a)) / den if den > 0 else math.nan


def decoded(r: RequestRecord) -> int:
    """Pixels the runtime decoded for a record: as recorded, or (older traces) by the runtime's
    JPEG downscale rule from the source and target sizes."""
    if r.decoded_pixels > 0:
        return r.decoded_pixels
    return decoded_pixels(r.source_width, r.source_height, r.target_width, r.target_height)


def calibrate(records: Iterable[RequestRecord]) -> Calibration:
    """Fit every stage that the records have enough data for."""
    recs = [r for r in records if r.outcome is Outcome.OK and r.uplink_end_s is None]
    cal = Calibration(requests=len(recs), fitted_range=FittedRange.of(recs))
    cal.workers = len({r.worker for r in recs if r.worker is not None})
    src = lambda r: r.source_width * r.source_height  # noqa: E731
    tgt = lambda r: r.target_width * r.target_height  # noqa: E731
    cpu = [r for r in recs if r.preproc_start_s is not None and r.decode_end_s is not None
           and r.resize_end_s is not None and r.normalize_end_s is not None]
    _stage(cal, "image_decode",
           [(r.decode_end_s - r.preproc_start_s, src(r), decoded(r))  # type: ignore[operator]
            for r in cpu], ["source_pixels", "decoded_pixels"])
    _stage(cal, "resize",
           [(r.resize_end_s - r.decode_end_s, decoded(r), tgt(r))  # type: ignore[operator]
            for r in cpu], ["decoded_pixels", "target_pixels"])
    _stage(cal, "normalize",
           [(r.normalize_end_s - r.resize_end_s, tgt(r)) for r in cpu],  # type: ignore[operator]
           ["target_pixels"])
    # encode: the encoder may queue (no timestamp marks its start), so use only requests that
    # found it idle: no earlier request's encode still running when this one's CPU work ended
    enc = []
    busy = -math.inf
    for r in sorted((r for r in cpu if r.encode_end_s is not None),
                    key=lambda r: r.normalize_end_s):  # type: ignore[arg-type, return-value]
        if busy <= r.normalize_end_s:  # type: ignore[operator]
            enc.append(r)
        busy = max(busy, float(r.encode_end_s or 0.0))
    cal.has_encode = any(r.encode_end_s is not None for r in cpu)
    if enc:
        _stage(cal, "encode", [(r.encode_end_s - r.normalize_end_s, r.image_tokens)  # type: ignore[operator]
                               for r in enc], ["image_tokens"])
    # hand-off: preprocessing done (the worker's last stamp) → the engine holds the request
    hand = [float(r.engine_queued_s) - float(r.encode_end_s or r.normalize_end_s)  # type: ignore[arg-type]
            for r in cpu if r.engine_queued_s is not None]
    hand = [h for h in hand if h >= 0.0]
    if len(hand) >= MIN_SAMPLES:
        cal.handoff_s, cal.handoff_n = float(np.median(hand)), len(hand)
    eng = sorted((r for r in recs if r.engine_queued_s is not None and r.first_token_s is not None
                  and r.last_token_s is not None), key=lambda r: r.engine_queued_s)  # type: ignore[arg-type, return-value]
    # prefill: the engine held nobody else from this request's queueing to its first token
    isolated = []
    busy_until = -math.inf
    for i, r in enumerate(eng):
        nxt = eng[i + 1].engine_queued_s if i + 1 < len(eng) else math.inf
        if busy_until <= r.engine_queued_s and nxt >= r.first_token_s:  # type: ignore[operator]
            isolated.append(r)
        busy_until = max(busy_until, float(r.last_token_s or 0.0))
    _stage(cal, "prefill", [(r.first_token_s - r.engine_queued_s, r.prompt_tokens)  # type: ignore[operator]
                            for r in isolated], ["prompt_tokens"])
    if "prefill" in cal.fits:
        cal.fits["prefill"].note = f"{len(isolated)} of {len(eng)} requests found the engine empty"
    # decode step: windows without another request's first token inside
    dec = [r for r in eng if r.output_tokens >= 2
           and float(r.last_token_s or 0.0) > float(r.first_token_s or 0.0)]
    if dec:
        conc = _Concurrency(dec)
        firsts = sorted(float(r.first_token_s or 0.0) for r in eng)
        windows = []
        for r in dec:
            a, b = float(r.first_token_s or 0.0), float(r.last_token_s or 0.0)
            if bisect.bisect_left(firsts, b) - bisect.bisect_right(firsts, a) == 0:
                windows.append((a, b, (b - a) / (r.output_tokens - 1)))
        # The mean step time over a window is the step-weighted mean of base + slope·batch; time
        # segments count in proportion to 1/step_time, which depends on the fit: iterate.
        base, slope = 1.0, 0.0
        rows: list[tuple[float, ...]] = []
        for _ in range(4):
            conc.weigh(lambda lv, b0=base, s0=slope: 1.0 / max(b0 + s0 * lv, 1e-12))
            rows = [(tpot, conc.mean(a, b)) for a, b, tpot in windows]
            _stage(cal, "decode_step", rows, ["batch"])
            fit = cal.fits.get("decode_step")
            if fit is None:
                break
            base, slope = fit.base_s, fit.per.get("batch", 0.0)
        if "decode_step" in cal.fits:
            cal.fits["decode_step"].note = f"{len(rows)} of {len(dec)} decode windows unpaused"
    return cal


class Intervals:
    """A union of time intervals, for "what fraction of [a, b] was covered"."""

    def __init__(self, spans: Iterable[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            elif b > a:
                merged.append([a, b])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self._cum = [0.0]
        for a, b in merged:
            self._cum.append(self._cum[-1] + b - a)

    def _covered_until(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)  # intervals starting at or before t
        if i == 0:
            return 0.0
        return self._cum[i - 1] + min(t, self.ends[i - 1]) - self.starts[i - 1]

    def fraction(self, a: float, b: float) -> float:
        return (self._covered_until(b) - self._covered_until(a)) / (b - a) if b > a else 0.0


def worker_busy(recs: Iterable[RequestRecord]) -> dict[int, Intervals]:
    """Each preprocessing worker's busy spans (decode start → normalize end)."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for r in recs:
        if r.worker is not None and r.preproc_start_s is not None and r.normalize_end_s is not None:
            spans.setdefault(r.worker, []).append((r.preproc_start_s, r.normalize_end_s))
    return {w: Intervals(v) for w, v in spans.items()}


def worker_seconds(s: EngineStep, workers: dict[int, Intervals]) -> float:
    """The seconds of step ``s`` during which workers were busy, summed over the workers."""
    return sum(iv.fraction(s.t_s - s.duration_s, s.t_s) for iv in workers.values()) * s.duration_s


def contention(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
               workers: dict[int, Intervals], sizes: tuple[int, ...] = ()) -> tuple[float, int]:
    """How much a busy preprocessing worker lengthens an engine step: ``step ≈ fitted + κ·x``,
    ``x`` the seconds of the step during which workers were busy (summed over workers); least
    squares through the origin on the steps that overlapped a worker, each weighted by
    1/fitted² — a step's own noise grows with its length (a cv), so a 1 s encoder step that a
    worker overlapped for 25 ms says next to nothing about κ, while a 5 ms decode step overlapped
    throughout says much; unweighted, the long steps' noise set κ (0.34 on one recording whose
    overlapped decode steps were no slower than the others). Returns ``(κ, steps)``: κ = 1 means
    each second of worker activity costs the step a second."""
    xs, ys, ws = [], [], []
    for s in steps:
        if s.duration_s <= 0:
            continue
        x = worker_seconds(s, workers)
        if x < 0.05 * s.duration_s:
            continue
        pred = step_prediction(fit, s, kv_cache_tokens, sizes)
        if pred <= 0:
            continue
        xs.append(x)
        ys.append(s.duration_s - pred)
        ws.append(1.0 / (pred * pred))
    if len(xs) < MIN_SAMPLES:
        return 0.0, len(xs)
    xa, ya, wa = np.asarray(xs), np.asarray(ys), np.asarray(ws)
    return max(0.0, float((wa * xa) @ ya / ((wa * xa) @ xa))), len(xs)


def cold_shape_factor(cold: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
                      workers: dict[int, Intervals], sizes: tuple[int, ...],
                      kappa: float) -> tuple[float, int]:
    """How much longer the steps that ran a shape the first time took than the model says
    (contention included): ``Σ measured / Σ modelled − 1`` over them, at least 0."""
    if len(cold) < MIN_SAMPLES:
        return 0.0, len(cold)
    measured = modelled = 0.0
    for s in cold:
        x = worker_seconds(s, workers)
        modelled += kappa * x + step_prediction(fit, s, kv_cache_tokens, sizes)
        measured += s.duration_s
    return max(0.0, measured / modelled - 1.0) if modelled > 0 else 0.0, len(cold)


DRIFT_MIN_STEPS = 50  # long quiet steps needed to fit the drift
DRIFT_MAX_LAG_S = 30.0
DRIFT_TAUS_S = tuple(0.25 * 1.25 ** k for k in range(30))  # 0.25 s … 160 s


def fit_drift_start(steps: list[EngineStep], runs: list[tuple[int, int]], fit: StageFit,
                    kv_cache_tokens: KVCache, sizes: tuple[int, ...], tau_s: float,
                    keep: set[int], min_step_s: float = 0.02) -> float:
    """Where a fresh server's drift starts (log units): the mean log residual of each run's long
    steps (indices in ``keep``) over its first ``τ`` seconds, less the run's own mean, divided by
    the mean of ``exp(−t/τ)`` over that window — the offset an OU process starting there and
    relaxing with ``τ`` would show. 0 when no run has steps early enough."""
    num = den = 0.0
    for a, b in runs:
        rows = []
        for i in range(a, b):
            s = steps[i]
            if i not in keep or s.duration_s <= 0:
                continue
            pred = step_prediction(fit, s, kv_cache_tokens, sizes)
            if pred >= min_step_s:
                rows.append((s.t_s - s.duration_s, math.log(s.duration_s / pred)))
        if len(rows) < DRIFT_MIN_STEPS:
            continue
        t0 = min(r[0] for r in rows)
        mean = sum(r[1] for r in rows) / len(rows)
        early = [(t - t0, r - mean) for t, r in rows if t - t0 < tau_s]
        num += sum(r for _, r in early)
        den += sum(math.exp(-t / tau_s) for t, _ in early)
    return num / den if den > 0 else 0.0


def fit_drift(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
              sizes: tuple[int, ...] = (), min_step_s: float = 0.02) -> tuple[float, float, int]:
    """The machine's slow drift, from the residuals of the long steps (``steps``: ones no worker
    overlapped): ``r = log(measured / fitted)`` less its mean; the covariance of two steps
    ``Δt`` apart is modelled as ``sd²·exp(−Δt/τ)`` (an Ornstein–Uhlenbeck process) and fitted by
    least squares over every pair within ``DRIFT_MAX_LAG_S`` — ``sd²`` in closed form for each
    ``τ`` of a grid, the best pair kept. The rest of the residual variance is the steps' own
    noise. Returns ``(sd, τ, steps used)``; ``(0, 0, n)`` with too few steps or no positive
    covariance. Steps shorter than ``min_step_s`` are left out: their ratio is mostly jitter."""
    rows = []
    for s in steps:
        pred = step_prediction(fit, s, kv_cache_tokens, sizes)
        if s.duration_s > 0 and pred >= min_step_s:
            rows.append((s.t_s, math.log(s.duration_s / pred)))
    if len(rows) < DRIFT_MIN_STEPS:
        return 0.0, 0.0, len(rows)
    rows.sort()
    t = np.asarray([r[0] for r in rows])
    r = np.asarray([r[1] for r in rows])
    r -= r.mean()
    lags, prods = [], []
    for i in range(len(t) - 1):
        j = int(np.searchsorted(t, t[i] + DRIFT_MAX_LAG_S, side="right"))
        if j > i + 1:
            lags.append(t[i + 1:j] - t[i])
            prods.append(r[i] * r[i + 1:j])
    if not lags:
        return 0.0, 0.0, len(rows)
    dt, p = np.concatenate(lags), np.concatenate(prods)
    best: tuple[float, float, float] | None = None  # (sse, s2, tau)
    for tau in DRIFT_TAUS_S:
        e = np.exp(-dt / tau)
        s2 = float(p @ e / (e @ e))
        sse = float(p @ p) - s2 * float(p @ e)
        if s2 > 0 and (best is None or sse < best[0]):
            best = (sse, s2, tau)
    if best is None:
        return 0.0, 0.0, len(rows)
    s2 = min(best[1], float(r.var()))
    return math.sqrt(s2), best[2], len(rows)


GAP_FEATURES = ("encoder_tokens", "decode_tokens")  # what the gap before a step grows with
GAP_UNITS = {"encoder_tokens": "image token", "decode_tokens": "sequence decoding"}


def fit_step_gap(steps: list[EngineStep], *,
                 features: tuple[str, ...] = GAP_FEATURES) -> tuple[float, dict[str, float]]:
    """The idle time between back-to-back steps (work was still running), ``g0 + Σ g_f·f`` over
    ``features`` of the step that follows, by least squares: ``(g0, {f: g_f})`` in seconds;
    ``(0, {})`` with fewer than MIN_SAMPLES gaps.

    vLLM's elapsed_ms covers the model's forward pass; scheduling, output processing and the
    hand-off to the frontend happen between steps, so the gap is part of every step's period.
    It grows with what the step holds (measured on a 2-core Zen 4, calibration runs):

    - ``encoder_tokens``: a step that starts an image waits longer before it, the engine first
      takes the request in, its processed pixels with it (2–4 ms before a 1230-token image step
      against 0.3–0.8 ms between decode steps). With image embeddings handed over
      (``--encoder onnx``) this term is left out.
    - ``decode_tokens``: every running sequence's token is sampled, detokenized and streamed
      between steps (mean gap 0.59 ms before a one-sequence decode step, 0.81 ms at 4,
      1.2–1.6 ms at 8–16). One mean made the light runs' small batches ~0.3 ms per step slow.

    Least squares with an intercept keeps the mean gap, negative gaps included: a step's ``t_s``
    is when its output reached the frontend, so each gap carries the difference of two
    deliveries' lags, which cancels in the mean over a run (it telescopes) but not in a median —
    the median was 0.75 ms where the steps' periods said 1.2, and a decode stream of 2 ms steps
    came out 17 % fast. A feature whose slope comes out ≤ 0 (the gap does not grow with it) is
    dropped and the rest refitted; a negative intercept (nothing left for a bare step) falls
    back to one mean. ``features=()``: one mean."""
    ordered = sorted(steps, key=lambda s: s.t_s)
    rows = [(b.t_s - b.duration_s - a.t_s, *(float(getattr(b, f)) for f in features))
            for a, b in itertools.pairwise(ordered)
            if a.running > 0 and abs(b.t_s - b.duration_s - a.t_s) < 0.05]
    if len(rows) < MIN_SAMPLES:
        return 0.0, {}
    arr = np.asarray(rows, dtype=float)
    gap = arr[:, 0]
    mean = max(0.0, float(gap.mean()))
    keep = [j for j in range(len(features))
            if np.count_nonzero(arr[:, 1 + j]) >= MIN_SAMPLES and float(arr[:, 1 + j].var()) > 0]
    while keep:
        a = np.column_stack([np.ones(len(gap))] + [arr[:, 1 + j] for j in keep])
        coef, *_ = np.linalg.lstsq(a, gap, rcond=None)
        slopes = coef[1:]
        if float(slopes.min()) <= 0:
            keep.pop(int(np.argmin(slopes)))
            continue
        if coef[0] < 0:
            return mean, {}
        return float(coef[0]), {features[j]: float(c) for j, c in zip(keep, slopes, strict=True)}
    return mean, {}


def input_processing(records: list[RequestRecord], steps: list[EngineStep]) -> StageFit | None:
    """vLLM's input processing, from the requests that found the engine idle: the time from the
    hand-over (``engine_queued_s``) to the start of the first step after it — no step was running
    at the hand-over and none started before that one, so nothing but the processing held the
    request — regressed on target pixels (the multimodal processor works on the resized image)."""
    ordered = sorted(steps, key=lambda s: s.t_s)
    starts = [s.t_s - s.duration_s for s in ordered]
    ends = [s.t_s for s in ordered]
    rows = []
    for r in records:
        q = r.engine_queued_s
        if q is None or r.first_token_s is None or not r.image_tokens:
            continue
        i = bisect.bisect_left(starts, q)  # the first step starting after the hand-over
        k = bisect.bisect_left(ends, q) - 1  # the last step ending before it
        if i >= len(ordered) or ordered[i].encoder_tokens <= 0:
            continue
        if k >= 0 and k + 1 != i:  # a step was running at the hand-over
            continue
        if starts[i] >= r.first_token_s:
            continue
        rows.append((starts[i] - q, r.target_width * r.target_height))
    if len(rows) < MIN_SAMPLES:
        return None
    arr = np.asarray(rows, dtype=float)
    fit = fit_linear("input_processing", arr[:, 1:], arr[:, 0], ["target_pixels"])
    fit.note = f"{len(rows)} requests that found the engine idle"
    return fit


def calibrate_traces(data: TraceData) -> Calibration:
    """:func:`calibrate` on the records, plus the step model and the host's contention.

    On a CPU host the engine's steps and the preprocessing workers share cores, so the step model
    is fitted on the steps during which no worker was busy, and the slowdown of the others
    (``κ``, extra step seconds per second of worker activity) is fitted after it; the simulator applies it through ``host:``."""
    cal = calibrate(data.records)
    engine = data.meta.get("engine")
    cal.engine = dict(engine) if isinstance(engine, dict) else {}
    cal.host_cores = int(data.meta.get("host_cores") or 0)
    cal.admission = {k: int(data.meta[k]) for k in ("max_pending", "max_inflight",
                                                      "max_engine_queue") if data.meta.get(k)}
    procs = data.meta.get("processes")
    if isinstance(procs, dict) and isinstance(procs.get("engine_worker"), dict):
        cal.engine_threads = len(procs["engine_worker"].get("cpu_affinity") or [])
    cal.steps = len(data.steps)
    kv = kv_cache(cal.engine)  # a hybrid model's state blocks are not context (sim.engine_kv)
    ok = [r for r in data.records if r.outcome is Outcome.OK]
    embeds = worker_encoder(data.meta)
    busy = worker_busy_through_encode(ok) if embeds else worker_busy(ok)
    if embeds:
        cal.encode_in_worker = True
        enc_fit = fit_worker_encode(ok)
        if enc_fit is not None:
            cal.fits["encode"] = enc_fit
        else:
            cal.fits.pop("encode", None)
            cal.skipped["encode"] = "fewer than 5 one-image requests with an encode stage"
    sizes = image_sizes(ok)
    # a step that ran a shape the first time on its server is slower (kernels built per shape):
    # fitted apart, as the cold-shape factor, and kept out of the step model's fit
    runs = data.runs or [(0, len(data.steps))]
    cold = cold_steps(data.steps, runs, sizes)
    warm = [s for i, s in enumerate(data.steps) if i not in cold]
    quiet = [s for s in warm
             if sum(iv.fraction(s.t_s - s.duration_s, s.t_s) for iv in busy.values()) < 0.05]
    use_quiet = len(quiet) >= 4 * MIN_SAMPLES and cal.host_cores > 0
    if data.steps:
        cal.input_processing = input_processing(ok, data.steps)
    cal.step = fit_steps(quiet if use_quiet else warm, kv, sizes, embeds)
    if cal.step is not None:
        # the idle time between steps is part of every step's period (fit_step_gap); with image
        # embeddings handed over (--encoder onnx) it does not grow with the image
        cal.step_gap_s, cal.step_gap_per = fit_step_gap(
            data.steps, features=tuple(f for f in GAP_FEATURES
                                       if not (embeds and f == "encoder_tokens")))
        # contention, cold shapes and drift compare a step's own time (vLLM's elapsed_ms) with the
        # model's, so they are fitted before the gap joins the base
        if use_quiet:
            cal.contention, cal.contention_n = contention(warm, cal.step, kv, busy, sizes)
        cal.cold_factor, cal.cold_n = cold_shape_factor(
            [data.steps[i] for i in cold], cal.step, kv, busy, sizes, cal.contention)
        sd, tau, _n = fit_drift(quiet if use_quiet else warm, cal.step, kv, sizes)
        if sd > 0:
            # the drift's share of the steps' spread is no longer independent noise
            cal.drift_sd, cal.drift_tau_s = sd, tau
            keep = {id(s) for s in (quiet if use_quiet else warm)}
            cal.drift_start = fit_drift_start(
                data.steps, runs, cal.step, kv, sizes, tau,
                {i for i, s in enumerate(data.steps) if id(s) in keep})
            cal.step.cv = math.sqrt(max(cal.step.cv ** 2 - (math.exp(sd * sd) - 1.0), 0.0))
        cal.step.base_s += cal.step_gap_s
        for f, g in cal.step_gap_per.items():
            cal.step.per[f] = cal.step.per.get(f, 0.0) + g
        cal.step.note = (f"{cal.step.n} of {cal.steps} engine steps"
                         + (", those with no worker busy" if use_quiet else "")
                         + f"; base includes a {cal.step_gap_s * 1e3:.3f} ms gap between steps"
                         + "".join(f", {f} {g * 1e6:.3g} µs per {GAP_UNITS[f]} of gap"
                                   for f, g in cal.step_gap_per.items()))
    elif data.steps:
        cal.skipped["step"] = f"{len(data.steps)} engine steps (need {MIN_SAMPLES})"
    return cal


def read_records(paths: Iterable[str | Path]) -> Iterable[RequestRecord]:
    for p in paths:
        for item in read_trace(p):
            if isinstance(item, RequestRecord):
                yield item


def to_profile(cal: Calibration, base: dict[str, Any] | None, name: str,
               sources: list[str]) -> dict[str, Any]:
    """A device-profile mapping: ``base`` (or a generic skeleton) with fitted stage models."""
    if base is None:
        base = {
            "name": name,
            "units": {"cpu": {"kind": "cpu", "count": max(1, cal.workers), "idle_w": 0.1,
                              "active_w": 1.0},
                      "gpu": {"kind": "gpu", "count": 1, "idle_w": 1.0, "active_w": 10.0}},
            "stages": {s: {"unit": "cpu" if s in ("image_decode", "resize", "normalize") else "gpu"}
                       for s in ("image_decode", "resize", "normalize", "prefill", "decode_step")},
            "thermal": {"r_c_per_w": 2.0, "c_j_per_c": 50.0, "ambient_c": 25.0},
            "assumed": ["units, power and thermal values are placeholders: calibrate only fits "
                        "service times"],
        }
    prof = dict(base)
    prof["name"] = name
    stages = {k: dict(v) for k, v in prof.get("stages", {}).items()}
    if not cal.has_encode and "encode" in stages:  # the traced runtime had no encoder stage
        del stages["encode"]
    for stage, fit in cal.fits.items():
        entry = stages.setdefault(stage, {"unit": "gpu" if stage == "encode" else "cpu"})
        entry["model"] = fit.model()
    if cal.encode_in_worker and "encode" in cal.fits:
        _encode_on_the_workers(stages, prof)
    prof["stages"] = stages
    if cal.workers:  # the measured machine's preprocessing concurrency, not the base's
        units = {k: dict(v) for k, v in prof.get("units", {}).items()}
        cpu = next((k for k, v in units.items() if v.get("kind") == "cpu"), None)
        if cpu is not None:
            units[cpu]["count"] = cal.workers
            prof["units"] = units
    if cal.step is not None:
        llm = dict(prof.get("llm") or {})
        e = cal.engine
        step: dict[str, Any] = {"base_s": float(f"{cal.step.base_s:.6g}"),
                                "per": {k: float(f"{cal.step.per.get(k, 0.0):.6g}")
                                        for k in STEP_FEATURES},
                                "cv": round(cal.step.cv, 4) if cal.step.cv >= 0.005 else 0.0}
        if cal.cold_factor > 0:
            step["cold_shape_factor"] = round(cal.cold_factor, 4)
        if cal.drift_sd > 0:
            step["drift_sd"] = round(cal.drift_sd, 4)
            step["drift_tau_s"] = float(f"{cal.drift_tau_s:.4g}")
            if abs(cal.drift_start) >= 1e-3:
                step["drift_start"] = round(cal.drift_start, 4)
        for key, src in (("max_num_batched_tokens", "max_num_batched_tokens"),
                         ("max_num_seqs", "max_num_seqs"), ("block_size_tokens", "block_size")):
            if e.get(src):
                step[key] = int(e[src])
        llm["step"] = step
        if e.get("max_num_seqs"):
            llm["max_batch"] = int(e["max_num_seqs"])
        if e.get("kv_cache_tokens"):
            llm["kv_capacity_tokens"] = int(e["kv_cache_tokens"])
        if cal.handoff_n:
            llm["handoff_s"] = float(f"{cal.handoff_s:.6g}")
        if cal.input_processing is not None:
            llm["input_processing"] = {**cal.input_processing.model(), "kind": "deterministic"}
            llm["input_processing"].pop("cv", None)
        prof["llm"] = llm
    if cal.admission:
        prof["admission"] = dict(cal.admission)
    if cal.requests:  # the sizes this profile's models interpolate between (sim.fitted_range)
        prof["fitted_range"] = cal.fitted_range.as_dict()
    if cal.step is not None and cal.host_cores and cal.engine.get("platform") == "cpu":
        # the engine and the preprocessing workers share the host's cores (a CPU-only runtime)
        prof["host"] = {"cores": cal.host_cores,
                        "engine_threads": cal.engine_threads or cal.host_cores,
                        "step_extra_s_per_worker_s": round(cal.contention, 4)}
    notes = [f"{s}: fitted on {f.n} requests, R² = {f.r2:.3f}" + (f" ({f.note})" if f.note else "")
             for s, f in cal.fits.items()]
    if cal.step is not None:
        notes.append(f"engine step model: fitted on {cal.step.n} steps, R² = {cal.step.r2:.3f}")
    if cal.host_cores:
        notes.append(f"measured host: {cal.host_cores} cores shared by the frontend, "
                     f"{cal.workers} preprocessing worker(s) and the engine")
    prof["sources"] = [*list(prof.get("sources", [])), f"calibrated from {', '.join(sources)}", *notes]
    if cal.skipped:
        prof["assumed"] = list(prof.get("assumed", [])) + [
            f"{s} not fitted ({why}); kept from the base profile" for s, why in cal.skipped.items()]
    return prof


def _encode_on_the_workers(stages: dict[str, Any], prof: dict[str, Any]) -> None:
    """The measured encoder ran in the preprocessing workers: its stage goes on the CPU stages'
    unit, where the simulator runs it in the worker after normalize (:class:`sim.device.Device`)."""
    cpu_unit = stages.get("image_decode", {}).get("unit")
    if cpu_unit is None:
        cpu_unit = next((k for k, v in prof.get("units", {}).items() if v.get("kind") == "cpu"),
                        "cpu")
    stages["encode"] = {**stages["encode"], "unit": cpu_unit}


def format_fits(cal: Calibration) -> str:
    lines = [f"{cal.requests} local requests, {cal.workers} workers"]
    for s, f in cal.fits.items():
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in f.per.items())
        lines.append(f"  {s:13s} {f.base_s * 1000:8.3f} ms" + (f" + {terms}" if terms else "")
                     + f"   cv {f.cv:.3f}  R² {f.r2:.3f}  n {f.n}" + (f"  [{f.note}]" if f.note else ""))
    if cal.step is not None:
        f = cal.step
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in f.per.items())
        lines.append(f"  {'engine step':13s} {f.base_s * 1000:8.3f} ms" + (f" + {terms}" if terms else "")
                     + f"   cv {f.cv:.3f}  R² {f.r2:.3f}  n {f.n}  [{f.note}]")
        if cal.contention_n:
            lines.append(f"  {'contention':13s} steps +{cal.contention:.3f} s per second a worker was busy "
                         f"(n {cal.contention_n}, {cal.host_cores} cores, engine on "
                         f"{cal.engine_threads})")
    if cal.cold_n:
        lines.append(f"  {'cold shapes':13s} steps +{cal.cold_factor * 100:.0f} % the first time "
                     f"a server ran their prefill length or image size (n {cal.cold_n})")
    if cal.drift_sd > 0:
        lines.append(f"  {'drift':13s} steps slow or fast together: sd {cal.drift_sd * 100:.1f} % "
                     f"(log), correlation time {cal.drift_tau_s:.3g} s, a fresh server starts "
                     f"at {cal.drift_start * 100:+.1f} %; own noise cv "
                     f"{cal.step.cv if cal.step else 0:.3f}")
    if cal.handoff_n:
        lines.append(f"  {'handoff':13s} {cal.handoff_s * 1000:8.3f} ms   median of {cal.handoff_n}")
    if cal.input_processing is not None:
        f = cal.input_processing
        terms = " + ".join(f"{v:.4g}·{k}" for k, v in f.per.items())
        lines.append(f"  {'vLLM input':13s} {f.base_s * 1000:8.3f} ms" + (f" + {terms}" if terms else "")
                     + f"   cv {f.cv:.3f}  R² {f.r2:.3f}  n {f.n}  [{f.note}]")
    for s, why in cal.skipped.items():
        lines.append(f"  {s:13s} not fitted: {why}")
    spans = ", ".join(f"{k} {span(lo, hi)}" for k, (lo, hi) in cal.fitted_range.as_dict().items())
    if spans:
        lines.append(f"  {'fitted range':13s} {spans}")
    return "\n".join(lines)
