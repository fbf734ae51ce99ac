"""Per-stage service-time fits from request records, with queueing kept out of them."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from edgeserve.records import EngineStep, Outcome, RequestRecord
from sim.core.workload import decoded_pixels
from sim.fit.calibration import Calibration
from sim.fit.coef_bootstrap import FitSamples
from sim.fit.least_squares import MIN_SAMPLES, StageFit, fit_linear
from sim.scenario.fitted_range import FittedRange


def _stage(cal: Calibration, stage: str, rows: list[tuple[float, ...]], names: list[str],
           times_s: list[float], per_image: bool = False) -> None:
    """Fit ``stage`` from ``rows`` (``(duration, *features)``; ``times_s``: when each happened,
    kept with the rows for the coefficients' bootstrap, :mod:`sim.fit.coef_bootstrap`).
    ``per_image``: an image stage, whose cv is its spread among images of one size
    (:func:`~sim.fit.least_squares.within_group_cv`)."""
    ok = [(r, t) for r, t in zip(rows, times_s, strict=True)
          if r[0] >= 0 and all(math.isfinite(v) for v in r)]
    if len(ok) < MIN_SAMPLES:
        cal.skipped[stage] = f"{len(ok)} usable records (need {MIN_SAMPLES})"
        return
    arr = np.asarray([r for r, _ in ok], dtype=float)
    cal.fits[stage] = fit_linear(stage, arr[:, 1:], arr[:, 0], names, cv_within_groups=per_image)
    cal.samples[stage] = FitSamples.of(names, arr[:, 1:], arr[:, 0], [t for _, t in ok])


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


def _stretch_of(stretch: Mapping[int, float] | None) -> Callable[[RequestRecord], float]:
    """A record's core-sharing stretch (:func:`sim.fit.host_effects.worker_stretch`), 1 without."""
    if stretch is None:
        return lambda r: 1.0
    return lambda r: stretch.get(id(r), 1.0)


def fit_stages(records: Iterable[RequestRecord],
               stretch: Mapping[int, float] | None = None) -> Calibration:
    """Fit every stage that the records have enough data for. ``stretch`` (by ``id(record)``,
    :func:`sim.fit.host_effects.worker_stretch`): how much the simulator will lengthen each
    request's preprocessing for sharing the host's cores; the worker stages' measured times are
    divided by it before they are fitted."""
    recs = [r for r in records if r.outcome is Outcome.OK and r.uplink_end_s is None]
    k = _stretch_of(stretch)
    cal = Calibration(requests=len(recs), fitted_range=FittedRange.of(recs))
    cal.workers = len({r.worker for r in recs if r.worker is not None})
    src = lambda r: r.source_width * r.source_height  # noqa: E731
    tgt = lambda r: r.target_width * r.target_height  # noqa: E731
    cpu = [r for r in recs if r.preproc_start_s is not None and r.decode_end_s is not None
           and r.resize_end_s is not None and r.normalize_end_s is not None]
    _stage(cal, "image_decode",
           [((r.decode_end_s - r.preproc_start_s) / k(r), src(r), decoded(r))  # type: ignore[operator]
            for r in cpu], ["source_pixels", "decoded_pixels"], [r.arrived_s for r in cpu],
           per_image=True)
    _stage(cal, "resize",
           [((r.resize_end_s - r.decode_end_s) / k(r), decoded(r), tgt(r))  # type: ignore[operator]
            for r in cpu], ["decoded_pixels", "target_pixels"], [r.arrived_s for r in cpu],
           per_image=True)
    _stage(cal, "normalize",
           [((r.normalize_end_s - r.resize_end_s) / k(r), tgt(r)) for r in cpu],  # type: ignore[operator]
           ["target_pixels"], [r.arrived_s for r in cpu], per_image=True)
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
        _stage(cal, "encode", [((r.encode_end_s - r.normalize_end_s) / k(r), r.image_tokens)  # type: ignore[operator]
                               for r in enc], ["image_tokens"], [r.arrived_s for r in enc],
               per_image=True)
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
                            for r in isolated], ["prompt_tokens"],
           [r.arrived_s for r in isolated])
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
            _stage(cal, "decode_step", rows, ["batch"], [a for a, _, _ in windows])
            fit = cal.fits.get("decode_step")
            if fit is None:
                break
            base, slope = fit.base_s, fit.per.get("batch", 0.0)
        if "decode_step" in cal.fits:
            cal.fits["decode_step"].note = f"{len(rows)} of {len(dec)} decode windows unpaused"
    return cal


ENCODE_FEATURES = ["image_tokens", "image_tokens_sq"]


def fit_worker_encode(records: Iterable[RequestRecord], stretch: Mapping[int, float] | None = None
                      ) -> tuple[StageFit, FitSamples] | None:
    """The worker-side encoder's service model, ``encode_end_s − normalize_end_s`` regressed on
    image tokens and image tokens² (the tower's attention runs over all of an image's patches).

    The encoder runs in the worker that has just patchified the image, right after it, so the
    duration has no queueing in it and every one-image request counts (a request whose images went
    to several workers has one span for all of them and is left out).

    ``stretch`` as in :func:`fit_stages`. Returns the fit and its rows (:class:`~sim.fit.coef_bootstrap.FitSamples`), so that the
    coefficients' bootstrap resamples the rows this model was fitted on."""
    k = _stretch_of(stretch)
    rows = [((float(r.encode_end_s) - float(r.normalize_end_s)) / k(r), r.image_tokens,
             float(r.image_tokens) ** 2, r.arrived_s)
            for r in records if r.outcome is Outcome.OK and r.num_images == 1 and r.image_tokens
            and r.encode_end_s is not None and r.normalize_end_s is not None]
    rows = [r for r in rows if r[0] >= 0 and math.isfinite(r[0])]
    if len(rows) < MIN_SAMPLES:
        return None
    arr = np.asarray(rows, dtype=float)
    fit = fit_linear("encode", arr[:, 1:3], arr[:, 0], ENCODE_FEATURES, cv_within_groups=True)
    fit.note = (f"in the preprocessing workers, {len(rows)} one-image requests; the engine got "
                "image embeddings, so its steps have no encoder terms")
    return fit, FitSamples.of(ENCODE_FEATURES, arr[:, 1:3], arr[:, 0], arr[:, 3])


def fit_input_processing(s: FitSamples) -> StageFit:
    """vLLM's input processing fitted on :func:`input_processing_rows`."""
    fit = fit_linear("input_processing", s.x, s.y, s.names)
    fit.note = f"{len(s.y)} requests that found the engine idle"
    return fit


def input_processing_rows(records: list[RequestRecord], steps: list[EngineStep],
                          first_step_s: Callable[[EngineStep], float] | None = None
                          ) -> FitSamples | None:
    """The rows of vLLM's input processing, from the requests that found the engine idle: the time
    from the hand-over (``engine_queued_s``, each row's time) to the start of the first step after
    it — no step was running at the hand-over and none started before that one, so nothing but
    the processing held the request — against target pixels (the multimodal processor works on
    the resized image).

    ``first_step_s``: the step model's time for that first step, where its own span is not
    measured — steps timed by output intervals (a GPU): after an idle engine there is no earlier
    output to time the step from, so its recorded span is ~0 and its work lies inside the wait.
    The row is then the hand-over to the first token less that time. On an H100 (2026-12-07) the
    wait was ~60 ms for a 1230-token image, ~35 ms of it the step; counted twice, the replays
    gave light loads' TTFT ~20 ms too much."""
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
        wait = (starts[i] - q if first_step_s is None
                else max(0.0, r.first_token_s - q - first_step_s(ordered[i])))
        rows.append((wait, r.target_width * r.target_height, q))
    if len(rows) < MIN_SAMPLES:
        return None
    arr = np.asarray(rows, dtype=float)
    return FitSamples.of(["target_pixels"], arr[:, 1:2], arr[:, 0], arr[:, 2])
