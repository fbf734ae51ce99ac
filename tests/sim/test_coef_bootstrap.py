"""Every fitted coefficient comes with an interval, and a term its data do not identify goes.

Synthetic step logs drawn from known coefficients with known noise: the bootstrap interval covers
the truth, and its standard error is the one least squares predicts in closed form
(``σ² (AᵀW²A)⁻¹`` for relative noise σ and weights 1/ŷ). A term with three rows is dropped, a
contention coefficient from a dozen noisy steps shrunk or dropped, and the profile carries the
section, which loads back.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edgeserve.records import EngineStep, Outcome, RequestRecord, TraceHeader, TraceWriter
from sim.fit.calibrate import calibrate_traces
from sim.fit.calibration import Calibration
from sim.fit.coef_bootstrap import FitSamples, bootstrap_fit
from sim.fit.fit_format import format_fits
from sim.fit.host_effects import Intervals, contention
from sim.fit.identify import (
    CONTENTION_TERM,
    identify_contention,
    identify_step,
    level_spread,
    step_samples,
    unidentified,
    worst,
)
from sim.fit.least_squares import StageFit
from sim.fit.profile_writer import to_profile
from sim.fit.step_fit import GPU_ONLY_TERMS, STEP_FEATURES, fit_steps
from sim.fit.traces import read_traces
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import build
from sim.scenario.uncertainty import ModelUncertainty, TermUncertainty
from tests.sim.test_calibrate_steps import KV_TOKENS, TRUE, step_log


def test_exact_steps_give_the_coefficients_back_with_intervals_of_no_width() -> None:
    steps = step_log(400, 0.0)
    # a CPU engine's steps: the GPU-only terms left out, as the calibrator does there
    cal = Calibration(step=fit_steps(steps, KV_TOKENS, exclude=GPU_ONLY_TERMS))
    u = identify_step(cal, steps, KV_TOKENS, (), False, {}, exclude=GPU_ONLY_TERMS)
    assert u is not None and not u.dropped
    for k, t in u.terms.items():
        assert t.value == pytest.approx(TRUE[k], rel=1e-5)
        assert t.interval[0] == pytest.approx(TRUE[k], rel=1e-5)
        assert t.interval[1] == pytest.approx(TRUE[k], rel=1e-5)


def test_the_interval_covers_the_truth_and_its_width_is_the_known_standard_error() -> None:
    cv = 0.05
    steps = step_log(3000, cv, seed=3)
    fit = fit_steps(steps, KV_TOKENS)
    assert fit is not None
    s = step_samples(steps, fit, KV_TOKENS, (), False, {}, frozenset())
    u = bootstrap_fit(s, fit.base_s, fit.per, block_s=0.5, seed=1)
    # closed form: residuals y·w − ŷ·w are the lognormal's relative noise, sd σ
    sigma = math.sqrt(math.exp(cv * cv) - 1.0)
    names = ["base_s", *(k for k in STEP_FEATURES if k in fit.per)]
    cols = [STEP_FEATURES.index(k) for k in names[1:]]
    a = np.column_stack([np.ones(len(s.y)), s.x[:, cols]]) * s.weights[:, None]  # type: ignore[index]
    se = sigma * np.sqrt(np.diag(np.linalg.inv(a.T @ a)))
    assert list(u.terms) == names
    for k, t in u.terms.items():
        assert t.interval[0] <= TRUE[k] <= t.interval[1], k
        assert t.se == pytest.approx(se[names.index(k)], rel=0.2), k


def test_a_step_term_with_three_rows_is_dropped_and_the_model_refitted() -> None:
    steps = [EngineStep(t_s=s.t_s, duration_s=s.duration_s - (
                 TRUE["encoder_tokens"] * s.encoder_tokens
                 + TRUE["encoder_tokens_sq"] * s.encoder_tokens ** 2) * (i >= 40),
                 prefill_tokens=s.prefill_tokens, decode_tokens=s.decode_tokens,
                 encoder_tokens=s.encoder_tokens if i < 40 else 0,
                 kv_cache_usage=s.kv_cache_usage)
             for i, s in enumerate(step_log(1200, 0.05))]
    assert sum(1 for s in steps if s.encoder_tokens) < 10
    cal = Calibration(step=fit_steps(steps, KV_TOKENS))
    u = identify_step(cal, steps, KV_TOKENS, (), False, {})
    assert u is not None and cal.step is not None
    assert "encoder_tokens" in u.dropped and "only" in u.dropped["encoder_tokens"]
    assert "encoder_tokens" not in cal.step.per and "encoder_tokens" not in u.terms
    assert any(line.startswith("engine step term encoder_tokens dropped")
               for line in cal.identification)
    assert cal.step.per["decode_tokens"] == pytest.approx(TRUE["decode_tokens"], rel=0.05)


def overlapped_steps(n: int, kappa: float, cv: float, seed: int) -> tuple[list[EngineStep],
                                                                          dict[int, Intervals]]:
    """Decode steps of 20 ms, every other one half-overlapped by a busy worker, which adds
    ``kappa`` seconds per second of overlap; lognormal noise ``cv``."""
    rng = np.random.default_rng(seed)
    steps, spans, t = [], [], 0.0
    for i in range(n):
        pred = TRUE["base_s"] + TRUE["decode_tokens"] * 8
        f = 0.5 if i % 2 else 0.0
        d = pred / (1 - kappa * f) * rng.lognormal(-cv * cv / 2, cv)
        t += d + 0.5
        steps.append(EngineStep(t_s=t, duration_s=d, decode_tokens=8, decode_requests=8))
        if f:
            spans.append((t - d, t - d + f * d))
    return steps, {0: Intervals(spans)}


def calibration_with(steps: list[EngineStep], workers: dict[int, Intervals]) -> Calibration:
    cal = Calibration(step=StageFit("step", 0, TRUE["base_s"],
                                    {"decode_tokens": TRUE["decode_tokens"]}, 0.0, 1.0))
    cal.contention, cal.contention_over, cal.contention_n = contention(
        steps, cal.step, 0, workers)  # type: ignore[arg-type]
    return cal


def test_a_well_measured_contention_is_kept_and_covered() -> None:
    steps, workers = overlapped_steps(800, 0.3, 0.02, seed=0)
    cal = calibration_with(steps, workers)
    u = identify_contention(cal, steps, 0, workers, (), {})
    assert u is not None
    t = u.terms["step_extra_s_per_worker_s"]
    assert t.interval[0] <= 0.3 <= t.interval[1]
    assert cal.contention == pytest.approx(0.3, rel=0.05) and not cal.identification


def test_a_contention_from_a_dozen_noisy_steps_is_shrunk_or_dropped_with_a_line_saying_why() -> None:
    steps, workers = overlapped_steps(24, 0.3, 0.4, seed=2)
    cal = calibration_with(steps, workers)
    raw = cal.contention
    assert raw > 0 and cal.contention_n == 12
    u = identify_contention(cal, steps, 0, workers, (), {})
    assert u is not None and u.shrunk_from == {CONTENTION_TERM: pytest.approx(raw)}
    assert cal.contention < 0.95 * raw
    assert len(cal.identification) == 1 and cal.identification[0].startswith(f"contention {raw:.3g}")


def test_the_level_spread_is_the_sd_of_the_log_levels() -> None:
    assert level_spread([1.0]) == 0.0
    assert level_spread([math.exp(-0.1), math.exp(0.1)]) == pytest.approx(math.sqrt(0.02))


def test_a_uniform_design_gives_the_textbook_interval_of_a_mean() -> None:
    rng = np.random.default_rng(5)
    y = 2.0 + rng.normal(0, 0.5, 4000)
    s = FitSamples.of([], np.zeros((4000, 0)), y, np.arange(4000) * 0.01)
    t = bootstrap_fit(s, float(y.mean()), {}, block_s=0.5).terms["base_s"]
    assert t.se == pytest.approx(0.5 / math.sqrt(4000), rel=0.15)
    # a 90 % interval of a normal mean: ± 1.645 standard errors around it
    assert t.interval[1] - t.interval[0] == pytest.approx(2 * 1.645 * t.se, rel=0.1)
    assert abs(t.value - 2.0) < 3 * t.se


def write_trace(path: Path, steps: list[EngineStep]) -> None:
    meta = {"workers": 1, "host_cores": 2, "engine": {"kv_cache_tokens": KV_TOKENS}}
    with TraceWriter(path, TraceHeader(producer="edgeserve serve", meta=meta)) as w:
        for i in range(8):
            t = 10.0 * i
            w.write(RequestRecord(id=f"r{i}", outcome=Outcome.OK, worker=0, arrived_s=t,
                                  engine_queued_s=t + 0.1, first_token_s=t + 0.2,
                                  last_token_s=t + 0.5, finished_s=t + 0.5, prompt_tokens=100,
                                  output_tokens=4))
        for s in steps:
            w.write(s)


def test_the_profile_carries_the_intervals_and_the_level_spread_and_loads(tmp_path: Path) -> None:
    slow = [EngineStep(t_s=s.t_s, duration_s=s.duration_s * 1.1, prefill_tokens=s.prefill_tokens,
                       decode_tokens=s.decode_tokens, encoder_tokens=s.encoder_tokens,
                       kv_cache_usage=s.kv_cache_usage) for s in step_log(600, 0.03)]
    write_trace(tmp_path / "a.jsonl", step_log(600, 0.03))
    write_trace(tmp_path / "b.jsonl", slow)
    cal = calibrate_traces(read_traces([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]))
    prof = to_profile(cal, None, "measured", ["a", "b"])
    u = prof["uncertainty"]
    assert cal.step is not None
    assert set(u["models"]["step"]["terms"]) == {"base_s", *cal.step.per}
    assert "decode_tokens" in cal.step.per
    lo, hi = u["models"]["step"]["terms"]["decode_tokens"]["interval"]
    assert lo < TRUE["decode_tokens"] * 1.05 < hi * 1.05
    assert u["levels"][1] / u["levels"][0] == pytest.approx(1.1, rel=0.02)
    assert u["level_sd"] == pytest.approx(math.log(1.1) / math.sqrt(2), rel=0.05)
    loaded = build(DeviceProfile, prof, "profile")
    assert loaded.uncertainty is not None
    assert loaded.uncertainty.models["step"].terms["decode_tokens"].n > 0
    assert "between servers" in format_fits(cal)
    old = {k: v for k, v in prof.items() if k != "uncertainty"}
    assert build(DeviceProfile, old, "profile").uncertainty is None


def test_a_stage_measured_at_one_size_keeps_a_per_pixel_cost_and_says_why() -> None:
    data = Path(__file__).parent / "data" / "calib.jsonl"  # every request one image size
    cal = calibrate_traces(read_traces([data]))
    fit = cal.fits["image_decode"]
    assert fit.base_s == 0.0 and list(fit.per) == ["source_pixels"]
    assert "image_decode term decoded_pixels dropped: every row has one size" in "\n".join(
        cal.identification)
    assert cal.uncertainty is not None
    t = cal.uncertainty.models["image_decode"].terms["source_pixels"]
    assert t.interval[0] < fit.per["source_pixels"] < t.interval[1]


def test_image_tokens_are_kept_and_their_unneeded_square_goes_over_three_sizes() -> None:
    # three image sizes: image tokens and their square are nearly collinear, and the truth has
    # no square term
    rng = np.random.default_rng(4)
    steps, t = [], 0.0
    for i in range(1500):
        enc = int(rng.choice([400, 800, 1200])) if i % 5 == 0 else 0
        prefill = enc + int(rng.integers(20, 600)) if i % 5 in (0, 1) else 0
        decode = int(rng.integers(0, 9))
        mean = (TRUE["base_s"] + TRUE["prefill_tokens"] * prefill
                + TRUE["decode_tokens"] * decode + 3e-4 * enc)
        d = mean * rng.lognormal(-0.02, 0.2)
        t += d + 0.01
        steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=prefill,
                                decode_tokens=decode, encoder_tokens=enc))
    cal = Calibration(step=fit_steps(steps, KV_TOKENS))
    u = identify_step(cal, steps, KV_TOKENS, (), False, {})
    assert u is not None and cal.step is not None
    assert "encoder_tokens" in cal.step.per
    assert cal.step.per["encoder_tokens"] == pytest.approx(3e-4, rel=0.15)
    assert "encoder_tokens_sq" not in cal.step.per


def test_unidentified_terms_go_one_at_a_time_the_least_distinguishable_first() -> None:
    def term(value: float, se: float, n: int = 100) -> TermUncertainty:
        return TermUncertainty(value, (value - 2 * se, value + 2 * se), se, n)

    # image tokens and their square, each unclear beside the other: only the square goes now,
    # and the refit decides about the other
    u = ModelUncertainty({"base_s": term(0.004, 1e-4), "encoder_tokens": term(2e-4, 1.5e-4),
                          "encoder_tokens_sq": term(1e-7, 1e-7)})
    bad = unidentified(u)
    assert set(bad) == {"encoder_tokens", "encoder_tokens_sq"}
    assert list(worst(u, bad)) == ["encoder_tokens_sq"]
    # too few rows is final whatever the others do: all such terms go at once
    u = ModelUncertainty({"base_s": term(0.004, 1e-4), "context_tokens": term(1e-7, 1e-8, n=3),
                          "prefill_x_context": term(1e-9, 1e-10, n=4),
                          "encoder_tokens": term(2e-4, 1.5e-4)})
    assert set(worst(u, unidentified(u))) == {"context_tokens", "prefill_x_context"}
