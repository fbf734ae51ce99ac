"""The engine step model fitted from per-step records, and the gap between steps."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable

import msgspec
import numpy as np

from edgeserve.records import EngineStep, RequestRecord
from sim.core.step_cost import StepCost
from sim.fit.engine_kv import KVCache, context_tokens
from sim.fit.least_squares import MIN_SAMPLES, StageFit, fit_linear
from sim.scenario.profiles import STEP_FEATURES as PROFILE_STEP_FEATURES

STEP_FEATURES = list(PROFILE_STEP_FEATURES)  # the step model's terms, in the profile's order
#: terms fitted only where vLLM's engine runs on the CPU: its attention over the whole batch's keys
#: and its tower's multi-image steps (:data:`sim.scenario.profiles.STEP_FEATURES` says why)
CPU_ONLY_TERMS = frozenset({"prefill_x_context", "encoder_tokens_cross"})
#: … and only on a GPU: requests taken in beside the step loop, and the piecewise CUDA graph of a
#: step that computes prompt tokens (on the CPU backend the former is part of the contention
#: with the workers, fitted apart, and the latter has no graph to lose)
GPU_ONLY_TERMS = frozenset({"image_arrivals", "prefill_step", "decode_beside_prefill"})


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


def with_image_arrivals(steps: list[EngineStep], records: Iterable[RequestRecord],
                        runs: list[tuple[int, int]],
                        record_runs: list[tuple[int, int]]) -> list[EngineStep]:
    """``steps`` with ``image_arrivals`` counted: the image requests of the same trace (``runs``
    and ``record_runs`` pair each trace's steps with its records) handed to the engine
    (``engine_queued_s``) while the step ran, in ``(t_s − duration_s, t_s]``."""
    recs = list(records)
    out = list(steps)
    for (a, b), (c, d) in zip(runs, record_runs, strict=True):
        times = np.sort(np.asarray([r.engine_queued_s for r in recs[c:d]
                                    if r.num_images and r.engine_queued_s is not None], dtype=float))
        if not len(times):
            continue
        for i in range(a, b):
            s = out[i]
            n = int(np.searchsorted(times, s.t_s, side="right")
                    - np.searchsorted(times, s.t_s - s.duration_s, side="right"))
            if n != s.image_arrivals:
                out[i] = msgspec.structs.replace(s, image_arrivals=n)
    return out


def step_features(s: EngineStep, kv_cache_tokens: KVCache,
                  image_sizes: tuple[int, ...] = ()) -> tuple[float, ...]:
    """A step's features in :data:`STEP_FEATURES` order (see :func:`encoder_square_sum`)."""
    sq = encoder_square_sum(s.encoder_tokens, image_sizes)
    ctx = context_tokens(s, kv_cache_tokens)
    others = max(0.0, ctx - s.prefill_tokens)
    return (s.prefill_tokens, s.decode_tokens, ctx,
            s.encoder_tokens, sq, float(s.encoder_tokens) ** 2 - sq, s.prefill_tokens * others,
            s.image_arrivals, float(s.prefill_tokens > 0),
            float(s.decode_tokens) if s.prefill_tokens > 0 else 0.0)


def step_prediction(fit: StageFit, s: EngineStep, kv_cache_tokens: KVCache,
                    sizes: tuple[int, ...] = ()) -> float:
    """The step model's time for step ``s`` (no contention, no noise), as the simulator's step
    engine prices it (:class:`~sim.core.step_cost.StepCost`)."""
    return StepCost(fit.base_s, fit.per).seconds(
        s.prefill_tokens, s.decode_tokens, context_tokens(s, kv_cache_tokens), s.encoder_tokens,
        encoder_square_sum(s.encoder_tokens, sizes), s.image_arrivals)


def step_rows(steps: Iterable[EngineStep], kv_cache_tokens: KVCache = 0,
              image_sizes: tuple[int, ...] = (), embeds: bool = False,
              exclude: frozenset[str] = frozenset(), window: int = 1) -> np.ndarray:
    """One row per step with a positive duration: ``[duration_s, t_s, *features]`` in
    :data:`STEP_FEATURES` order, the encoder terms zero with ``embeds``, and those in ``exclude`` zero
    too (see :func:`fit_steps`). ``window`` > 1: one row per ``window`` consecutive steps (in
    time order), their mean — for steps timed by output intervals (:mod:`edgeserve.step_span`),
    whose spans are exact in sum but can land on a neighbouring step one by one; the model is
    linear, so the mean of the steps' times is the model of their mean features."""
    rows = [(s.duration_s, s.t_s, *step_features(s, kv_cache_tokens, image_sizes))
            for s in steps if s.duration_s > 0]
    arr = np.asarray(rows, dtype=float).reshape(len(rows), 2 + len(STEP_FEATURES))
    if window > 1 and len(arr) >= window:
        arr = arr[np.argsort(arr[:, 1], kind="stable")]
        n = len(arr) // window * window
        arr = arr[:n].reshape(n // window, window, arr.shape[1]).mean(axis=1)
    gone = [2 + j for j, k in enumerate(STEP_FEATURES)
            if k in exclude or (embeds and k in ("encoder_tokens", "encoder_tokens_sq",
                                                 "encoder_tokens_cross"))]
    arr[:, gone] = 0.0
    return arr


def fit_steps(steps: Iterable[EngineStep], kv_cache_tokens: KVCache = 0,
              image_sizes: tuple[int, ...] = (), embeds: bool = False,
              exclude: frozenset[str] = frozenset(), window: int = 1,
              by_seconds: bool = False) -> StageFit | None:
    """The step-time model from per-step records (``None`` with fewer than MIN_SAMPLES steps).

    The coefficients minimise *relative* errors (least squares weighted by 1/ŷ of a first,
    unweighted pass, twice): step times span millisecond decode steps to encoder steps a hundred
    times longer, and seconds-weighted least squares let the largest steps set the slope, so
    mid-sized image steps came out too long and multi-image steps too short — and waiting times
    grow with the second moment of the step times, which that misfit shrinks.

    Its ``cv`` is the spread *weighted by step time* (√(Σ residual² / Σ fitted²)): a 2 ms decode
    step that took 4 ms says little about how a 300 ms encoder step varies, while an unweighted
    spread of ratios would let the many short steps set the noise of the long ones.

    ``embeds``: the engine was handed image embeddings (``--encoder onnx``), so its steps ran no
    vision tower — whatever vLLM counts as encoder tokens then costs nothing to encode, and the
    encoder terms are left out (zero) instead of soaking up prefill time. ``exclude``: terms
    left out the same way (ones the data did not identify, :mod:`sim.fit.identify`). ``window``:
    fit the means of that many consecutive steps (:func:`step_rows`). ``by_seconds``: plain least
    squares on those means instead — for windows of output-interval steps (a GPU), whose means
    span a few milliseconds to a few tens, not the hundredfold range of single CPU steps, and
    whose sum is the engine's busy time that queues build on: relative weights let the many
    decode-only windows price the rarer image windows ~10–20 % low (the 2026-12-07 H100
    calibration, each server's fit predicting the other's windows)."""
    arr = np.delete(step_rows(steps, kv_cache_tokens, image_sizes, embeds, exclude, window), 1,
                    axis=1)
    if len(arr) < MIN_SAMPLES:
        return None

    def predict(f: StageFit) -> np.ndarray:
        coef = np.asarray([f.per.get(k, 0.0) for k in STEP_FEATURES])
        return np.asarray(f.base_s + arr[:, 1:] @ coef)

    fit = fit_linear("step", arr[:, 1:], arr[:, 0], STEP_FEATURES)
    for _ in range(0 if by_seconds else 2):
        floor = max(float(np.median(arr[:, 0])) * 0.1, 1e-6)
        fit = fit_linear("step", arr[:, 1:], arr[:, 0], STEP_FEATURES,
                         weights=1.0 / np.maximum(predict(fit), floor))
    pred = predict(fit)
    ss_tot = float(np.sum((arr[:, 0] - arr[:, 0].mean()) ** 2))
    fit.r2 = 1 - float(np.sum((arr[:, 0] - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    fit.cv = float(np.sqrt(np.sum((arr[:, 0] - pred) ** 2) / np.sum(pred ** 2)))
    return fit


GAP_FEATURES = ("encoder_tokens", "decode_tokens")  # what the gap before a step grows with


GAP_UNITS = {"encoder_tokens": "image token", "decode_tokens": "sequence decoding"}


def gap_rows(steps: list[EngineStep], features: tuple[str, ...] = GAP_FEATURES) -> np.ndarray:
    """One row per gap between back-to-back steps (:func:`fit_step_gap`): ``[gap_s, t_s of the
    step that follows, *its features]``."""
    ordered = sorted(steps, key=lambda s: s.t_s)
    rows = [(b.t_s - b.duration_s - a.t_s, b.t_s, *(float(getattr(b, f)) for f in features))
            for a, b in itertools.pairwise(ordered)
            if a.running > 0 and abs(b.t_s - b.duration_s - a.t_s) < 0.05]
    return np.asarray(rows, dtype=float).reshape(len(rows), 2 + len(features))


def fit_step_gap(steps: list[EngineStep], *,
                 features: tuple[str, ...] = GAP_FEATURES) -> tuple[float, dict[str, float]]:
    """The idle time between back-to-back steps (work was still running), ``g0 + Σ g_f·f`` over
    ``features`` of the step that follows, by least squares: ``(g0, {f: g_f})`` in seconds;
    ``(0, {})`` with fewer than MIN_SAMPLES gaps.

    vLLM's elapsed_ms covers the model's forward pass; scheduling, output processing and the
    hand-off to the frontend happen between steps, so the gap is part of every step's period.
    It grows with what the step holds (docs/sim.md, "Calibration", has the measured gaps):

    - ``encoder_tokens``: a step that starts an image waits longer before it, the engine first
      takes the request in, its processed pixels with it. With image embeddings handed over
      (``--encoder onnx``) this term is left out.
    - ``decode_tokens``: every running sequence's token is sampled, detokenized and streamed
      between steps. One mean would make a light load's small batches slow.

    Least squares with an intercept keeps the mean gap, negative gaps included: a step's ``t_s``
    is when its output reached the frontend, so each gap carries the difference of two
    deliveries' lags, which cancels in the mean over a run (it telescopes) but not in a median,
    which comes out short of the steps' periods and makes a decode stream fast. A feature whose slope comes out ≤ 0 (the gap does not grow with it) is
    dropped and the rest refitted; a negative intercept (nothing left for a bare step) falls
    back to one mean. ``features=()``: one mean."""
    arr = np.delete(gap_rows(steps, features), 1, axis=1)
    if len(arr) < MIN_SAMPLES:
        return 0.0, {}
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
