"""The engine's step-time model is fitted from the runtime's per-step records.

A synthetic step log drawn from known coefficients (with and without noise) must give them back;
the trace header's engine limits and the measured number of workers go into the profile, over
whatever the base profile said.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edgeserve.records import EngineStep, Outcome, RequestRecord, TraceHeader, TraceWriter
from sim.fit.calibrate import calibrate_traces
from sim.fit.host_effects import cold_shape_factor, fit_drift
from sim.fit.profile_writer import to_profile
from sim.fit.step_fit import GPU_ONLY_TERMS, cold_steps, fit_step_gap, fit_steps
from sim.fit.traces import read_traces

TRUE = {"base_s": 0.004, "prefill_tokens": 2.0e-5, "decode_tokens": 3.0e-4,
        "context_tokens": 1.0e-7, "encoder_tokens": 1.0e-4, "encoder_tokens_sq": 6.0e-8,
        "prefill_x_context": 1.0e-9}
KV_TOKENS = 65536


def step_log(n: int, noise_cv: float, seed: int = 0) -> list[EngineStep]:
    rng = np.random.default_rng(seed)
    steps = []
    t = 0.0
    for _ in range(n):
        prefill = int(rng.choice([0, 0, rng.integers(1, 2048)]))
        decode = int(rng.integers(0, 17))
        enc = int(rng.choice([0, 0, 0, rng.integers(64, 1281)])) if prefill else 0
        usage = float(rng.uniform(0.0, 0.5))
        mean = (TRUE["base_s"] + TRUE["prefill_tokens"] * prefill + TRUE["decode_tokens"] * decode
                + TRUE["context_tokens"] * usage * KV_TOKENS + TRUE["encoder_tokens"] * enc
                + TRUE["encoder_tokens_sq"] * enc * enc
                + TRUE["prefill_x_context"] * prefill * max(0.0, usage * KV_TOKENS - prefill))
        d = mean * (rng.lognormal(-noise_cv**2 / 2, noise_cv) if noise_cv else 1.0)
        t += d
        steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=prefill,
                                prefill_requests=int(prefill > 0), decode_tokens=decode,
                                decode_requests=decode, encoder_tokens=enc,
                                kv_cache_usage=usage))
    return steps


def test_exact_steps_give_back_the_coefficients() -> None:
    fit = fit_steps(step_log(400, 0.0), KV_TOKENS)
    assert fit is not None
    assert fit.base_s == pytest.approx(TRUE["base_s"], rel=1e-6)
    for k in ("prefill_tokens", "decode_tokens", "context_tokens", "encoder_tokens",
              "encoder_tokens_sq", "prefill_x_context"):
        assert fit.per[k] == pytest.approx(TRUE[k], rel=1e-6)
    assert fit.r2 == pytest.approx(1.0) and fit.cv < 1e-9


def test_noisy_steps_give_the_coefficients_within_ten_percent_and_the_noise() -> None:
    # 10 % lognormal noise on every step: long prefill steps carry most of the absolute noise,
    # so the small per-decode-token term is the least certain (unweighted least squares)
    fit = fit_steps(step_log(5000, 0.1, seed=1), KV_TOKENS)
    assert fit is not None
    for k in ("prefill_tokens", "decode_tokens", "encoder_tokens_sq"):
        assert fit.per[k] == pytest.approx(TRUE[k], rel=0.1)
    assert fit.base_s == pytest.approx(TRUE["base_s"], rel=0.1)
    assert fit.cv == pytest.approx(0.1, rel=0.15)


def test_a_step_encoding_two_images_is_fitted_its_cross_term_apart() -> None:
    # vLLM reports one encoder-token total per step; with the trace's image sizes (300, 900) it is
    # split into images (1200 = 300 + 900, 600 = 300 + 300): Σ tokens² per image, and the cross
    # term (Σ tokens)² − Σ tokens², which is 0 for a one-image step
    rng = np.random.default_rng(4)
    true = {"prefill_tokens": 2.0e-5, "decode_tokens": 3.0e-4, "encoder_tokens_sq": 6.0e-8,
            "encoder_tokens_cross": 2.0e-8}
    steps, t = [], 0.0
    for _ in range(400):
        images = [int(x) for x in rng.choice([300, 900], size=int(rng.integers(0, 3)))]
        enc = sum(images)
        prefill = enc + int(rng.integers(1, 200))
        decode = int(rng.integers(0, 17))
        sq = sum(x * x for x in images)
        d = (0.004 + true["prefill_tokens"] * prefill + true["decode_tokens"] * decode
             + true["encoder_tokens_sq"] * sq + true["encoder_tokens_cross"] * (enc * enc - sq))
        t += d
        steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=prefill, prefill_requests=1,
                                decode_tokens=decode, decode_requests=decode, encoder_tokens=enc))
    # every step computes prompt tokens: the GPU's prefill-step terms would be the intercept and
    # the decode slope again (the calibrator fits them only on a GPU, as here on the CPU's terms)
    fit = fit_steps(steps, KV_TOKENS, image_sizes=(300, 900), exclude=GPU_ONLY_TERMS)
    assert fit is not None
    for k, v in true.items():
        assert fit.per[k] == pytest.approx(v, rel=1e-6)
    # without the sizes every total counts as one image: the cross term has nothing to fit
    lumped = fit_steps(steps, KV_TOKENS)
    assert lumped is not None and lumped.per.get("encoder_tokens_cross", 0.0) == 0.0
    assert lumped.cv > 0.01


def test_too_few_steps_fit_nothing() -> None:
    assert fit_steps(step_log(4, 0.0), KV_TOKENS) is None


def test_the_profile_takes_the_step_model_limits_and_workers_from_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    meta = {"workers": 1, "host_cores": 2,
            "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "block_size": 128,
                       "kv_cache_tokens": KV_TOKENS}}
    with TraceWriter(trace, TraceHeader(producer="edgeserve serve", meta=meta)) as w:
        for i in range(8):
            t = 10.0 * i
            w.write(RequestRecord(id=f"r{i}", outcome=Outcome.OK, worker=0, arrived_s=t,
                                  engine_queued_s=t + 0.1, first_token_s=t + 0.2,
                                  last_token_s=t + 0.5, finished_s=t + 0.5, prompt_tokens=100,
                                  output_tokens=4))
        for s in step_log(50, 0.0):
            w.write(s)
    cal = calibrate_traces(read_traces([trace]))
    base = {"name": "b", "units": {"cpu": {"kind": "cpu", "count": 6}}, "stages": {},
            "llm": {"kv_capacity_tokens": 8192, "max_batch": 8}}
    prof = to_profile(cal, base, "measured", [str(trace)])
    assert prof["units"]["cpu"]["count"] == 1  # the trace's one worker, not the base's 6
    step = prof["llm"]["step"]
    assert (step["max_num_seqs"], step["max_num_batched_tokens"], step["block_size_tokens"]) == (
        16, 2048, 128)
    assert step["per"]["decode_tokens"] == pytest.approx(TRUE["decode_tokens"], rel=1e-5)
    assert (prof["llm"]["max_batch"], prof["llm"]["kv_capacity_tokens"]) == (16, KV_TOKENS)
    assert any("2 cores shared" in s for s in prof["sources"])


def ou_step_log(n: int, sd: float, tau_s: float, seed: int = 0) -> list[EngineStep]:
    """Back-to-back 60 ms prefill steps slowed by exp(x), x an OU process (sd, τ)."""
    rng = np.random.default_rng(seed)
    steps, t, x = [], 0.0, sd * rng.standard_normal()
    for _ in range(n):
        d = (TRUE["base_s"] + TRUE["prefill_tokens"] * 2000 + TRUE["decode_tokens"] * 4) \
            * math.exp(x - sd * sd / 2)
        t += d
        steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=2000, prefill_requests=1,
                                decode_tokens=4, decode_requests=4))
        a = math.exp(-d / tau_s)
        x = x * a + sd * math.sqrt(1 - a * a) * rng.standard_normal()
    return steps


def test_the_drift_of_step_times_is_recovered_from_their_residuals() -> None:
    # 3000 steps (≈ 3 min) of a drift with sd 8 %, τ = 5 s: sd within 15 %, τ within a factor 1.6
    steps = ou_step_log(3000, 0.08, 5.0, seed=3)
    fit = fit_steps(steps, KV_TOKENS)
    assert fit is not None
    # the step model is exact but for the drift, so fit it with the true coefficients
    fit.base_s = TRUE["base_s"]
    fit.per = {"prefill_tokens": TRUE["prefill_tokens"], "decode_tokens": TRUE["decode_tokens"]}
    sd, tau, n = fit_drift(steps, fit, KV_TOKENS)
    assert n == 3000
    assert sd == pytest.approx(0.08, rel=0.15)
    assert 5.0 / 1.6 < tau < 5.0 * 1.6


def test_independent_step_noise_shows_no_drift_worth_the_name() -> None:
    steps = step_log(3000, 0.1, seed=4)
    fit = fit_steps(steps, KV_TOKENS)
    assert fit is not None
    sd, _tau, _n = fit_drift(steps, fit, KV_TOKENS, min_step_s=0.0)
    assert sd < 0.03  # of a 10 % own noise: none of it correlated


def test_steps_running_a_shape_the_first_time_on_their_server_are_cold() -> None:
    # two runs (servers); prefill counts 100, 100, 300 in each; an image of 200 tokens in the
    # second step of the first run (1 image of a trace size) is new although 100 is not
    def s(t: float, prefill: int, enc: int = 0) -> EngineStep:
        return EngineStep(t_s=t, duration_s=0.01, prefill_tokens=prefill, encoder_tokens=enc)

    steps = [s(1, 100), s(2, 100, 200), s(3, 300), s(4, 0),
             s(11, 100), s(12, 100), s(13, 300, 200)]
    assert cold_steps(steps, [(0, 4), (4, 7)], (200,)) == {0, 1, 2, 4, 6}


def test_the_cold_factor_is_what_the_cold_steps_took_over_the_model() -> None:
    fit = fit_steps(step_log(400, 0.0), KV_TOKENS)
    assert fit is not None
    cold = [EngineStep(t_s=float(i), duration_s=1.5 * (TRUE["base_s"] + TRUE["prefill_tokens"] * p),
                       prefill_tokens=p) for i, p in enumerate((100, 700, 1500, 2000, 50, 900))]
    factor, n = cold_shape_factor(cold, fit, KV_TOKENS, {}, (), 0.0)
    assert n == 6 and factor == pytest.approx(0.5, rel=1e-6)


def test_the_gap_before_a_step_grows_with_its_image_and_its_batch() -> None:
    # back-to-back steps whose idle time before them is 0.4 ms plus 2 µs per image token the
    # step encodes (the engine takes the request and its pixels in first) plus 60 µs per sequence
    # it decodes (each one's token is sampled, detokenized and streamed), with zero-mean jitter:
    # the fit gives back all three, and its mean is the mean gap (the periods telescope)
    rng = np.random.default_rng(3)
    steps, t, gaps = [], 0.0, []
    for _ in range(3000):
        enc = int(rng.choice([0, 0, 0, 221, 609, 1230]))
        batch = int(rng.integers(1, 12))
        gap = 4e-4 + 2e-6 * enc + 6e-5 * batch + float(rng.normal(0.0, 2e-4))
        d = 0.002 + 2e-4 * enc
        t += gap + d
        gaps.append(gap)
        steps.append(EngineStep(t_s=t, duration_s=d, encoder_tokens=enc, prefill_tokens=enc,
                                decode_tokens=batch, running=batch + 1))
    g0, per = fit_step_gap(steps)
    assert g0 == pytest.approx(4e-4, abs=2e-5)
    assert per["encoder_tokens"] == pytest.approx(2e-6, rel=0.03)
    assert per["decode_tokens"] == pytest.approx(6e-5, rel=0.05)
    later = steps[1:]
    assert g0 + sum(g * float(np.mean([getattr(s, f) for s in later])) for f, g in per.items()) \
        == pytest.approx(float(np.mean(gaps[1:])), rel=1e-9)
    # one mean with no features (nothing to grow with)
    assert fit_step_gap(steps, features=()) == (pytest.approx(float(np.mean(gaps[1:]))), {})
    # a gap that shrinks with the image: that term is dropped, the batch's is kept
    shrinking = [EngineStep(t_s=s.t_s - 2.1e-6 * sum(x.encoder_tokens for x in steps[:i + 1]),
                            duration_s=s.duration_s, encoder_tokens=s.encoder_tokens,
                            decode_tokens=s.decode_tokens, running=s.running)
                 for i, s in enumerate(steps)]  # 0.4 ms − 0.1 µs per image token + 60 µs/seq
    g0, per = fit_step_gap(shrinking)
    assert set(per) == {"decode_tokens"} and per["decode_tokens"] == pytest.approx(6e-5, rel=0.05)


def test_a_gap_that_leaves_nothing_for_a_bare_step_falls_back_to_one_mean() -> None:
    # 60 µs per sequence and a −0.2 ms intercept: a one-sequence step would wait a negative time
    steps, t = [], 0.0
    for i in range(200):
        batch = 4 + i % 8
        t += -2e-4 + 6e-5 * batch + 0.002
        steps.append(EngineStep(t_s=t, duration_s=0.002, decode_tokens=batch, running=batch))
    g0, per = fit_step_gap(steps)
    assert per == {}
    assert g0 == pytest.approx(float(np.mean([-2e-4 + 6e-5 * s.decode_tokens
                                              for s in steps[1:]])), rel=1e-9)


def test_a_servers_warm_up_steps_are_not_read_as_traffic(tmp_path: Path) -> None:
    """``edgeserve serve`` runs warm-up requests before it is ready; their steps stay in the
    trace, before the header's ``warmup.end_t_s``, and calibration leaves them out."""
    from sim.fit.traces import read_traces

    header = TraceHeader(producer="edgeserve serve", clock="monotonic", wall_offset_s=0.0,
                         meta={"warmup": {"end_t_s": 10.0}})
    w = TraceWriter(tmp_path / "t.jsonl", header)
    for t in (9.0, 10.0, 10.5, 11.0):
        w.write(EngineStep(t_s=t, duration_s=0.1, prefill_tokens=int(t * 10)))
    w.close()
    data = read_traces([tmp_path / "t.jsonl"])
    assert [s.t_s for s in data.steps] == [10.5, 11.0] and data.runs == [(0, 2)]


def _spans_moved_between_neighbours(steps: list[EngineStep], seed: int) -> list[EngineStep]:
    """What output intervals do to exact step times under async scheduling: a share of one
    step's time lands on its neighbour, the sum stays (edgeserve.step_span)."""
    import msgspec

    rng = np.random.default_rng(seed)
    d = [s.duration_s for s in steps]
    for i in range(0, len(d) - 1, 2):
        moved = float(rng.uniform(0.0, 0.9)) * (d[i] if rng.random() < 0.5 else -d[i + 1])
        d[i], d[i + 1] = d[i] - moved, d[i + 1] + moved
    return [msgspec.structs.replace(s, duration_s=v) for s, v in zip(steps, d, strict=True)]


def test_steps_timed_by_output_intervals_are_fitted_in_windows_whose_sums_are_exact() -> None:
    exact = step_log(3200, 0.0, seed=4)
    shuffled = _spans_moved_between_neighbours(exact, seed=5)
    assert sum(s.duration_s for s in shuffled) == pytest.approx(sum(s.duration_s for s in exact),
                                                                rel=1e-3)
    one_by_one = fit_steps(shuffled, KV_TOKENS)
    windowed = fit_steps(shuffled, KV_TOKENS, window=8)
    assert one_by_one is not None and windowed is not None
    # one step at a time the misplaced time is noise the fit cannot place; the means of 8
    # consecutive steps carry only what crossed a window's edge
    assert windowed.r2 > 0.95 > one_by_one.r2
    for k in ("prefill_tokens", "decode_tokens", "encoder_tokens"):
        assert windowed.per[k] == pytest.approx(TRUE[k], rel=0.1)


def test_a_gpu_trace_fits_its_steps_in_windows_without_the_cpu_backends_terms() -> None:
    from sim.fit.traces import TraceData

    steps = _spans_moved_between_neighbours(step_log(3200, 0.0, seed=6), seed=7)
    engine = {"platform": "gpu", "step_timing": "output_interval", "kv_cache_tokens": KV_TOKENS,
              "max_num_seqs": 64, "max_num_batched_tokens": 8192, "block_size": 16}
    cal = calibrate_traces(TraceData(steps=steps, meta={"engine": engine},
                                     runs=[(0, len(steps))], record_runs=[(0, 0)]))
    assert cal.step is not None
    # vLLM's CPU backend attends a prefill over the batch's keys; a GPU's attention does not
    assert "prefill_x_context" not in cal.step.per
    # single steps' ratios to the model say nothing of drift when their spans are approximate
    assert cal.drift_sd == 0.0
    # fitted on the means of 8 consecutive steps: one row per window
    assert cal.step.n <= len(steps) // 8


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_the_multi_image_cross_term_is_fitted_only_for_vllms_cpu_tower(platform: str) -> None:
    # the same steps, a step of two images costing more than the two alone: vLLM's CPU tower
    # does that and the term is fitted; a GPU's varlen attention encodes each image apart (two
    # 1,250-token images in one step took 78.5 ms on an H100 against 2 × 35.8 ms alone), so on a
    # GPU the term is not fitted, and no few multi-image steps of a calibration can price a step
    # of six images at half a second
    from sim.fit.traces import TraceData

    rng = np.random.default_rng(4)
    steps, t = [], 0.0
    for _ in range(2400):
        images = [int(x) for x in rng.choice([300, 900], size=int(rng.integers(0, 3)))]
        enc, sq = sum(images), sum(x * x for x in images)
        prefill, decode = enc + int(rng.integers(1, 200)), int(rng.integers(0, 17))
        d = (0.004 + 2e-5 * prefill + 3e-4 * decode + 6e-8 * sq + 2e-8 * (enc * enc - sq))
        t += d
        steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=prefill, prefill_requests=1,
                                decode_tokens=decode, decode_requests=decode, encoder_tokens=enc))
    records = [RequestRecord(id=f"r{i}", arrived_s=float(i), num_images=1, image_tokens=n,
                             prompt_tokens=n + 20, output_tokens=4, first_token_s=i + 0.1,
                             finished_s=i + 0.2, last_token_s=i + 0.2)
               for i, n in enumerate([300, 900] * 10)]
    engine = {"platform": platform, "kv_cache_tokens": KV_TOKENS, "max_num_seqs": 64,
              "max_num_batched_tokens": 8192, "block_size": 16}
    cal = calibrate_traces(TraceData(records=records, steps=steps, meta={"engine": engine},
                                     runs=[(0, len(steps))], record_runs=[(0, len(records))]))
    assert cal.step is not None
    cross = cal.step.per.get("encoder_tokens_cross", 0.0)
    if platform == "cpu":
        assert cross == pytest.approx(2e-8, rel=0.05)
    else:
        assert cross == 0.0


def test_image_requests_taken_in_during_a_step_are_counted_and_priced_on_a_gpu() -> None:
    # steps of 2 ms + 0.1 ms per decoding sequence, each lengthened by 16 ms per image request
    # handed to the engine while it ran (vLLM's CPU-side intake beside a GPU's step loop); the
    # calibrator counts the arrivals from the request records and fits their price
    from sim.fit.step_fit import with_image_arrivals
    from sim.fit.traces import TraceData

    rng = np.random.default_rng(9)
    steps, records, t = [], [], 0.0
    for i in range(4000):
        dec = int(rng.integers(1, 33))
        arrivals = int(rng.random() < 0.15) + int(rng.random() < 0.03)
        d = 0.002 + 1e-4 * dec + 0.016 * arrivals
        for k in range(arrivals):
            records.append(RequestRecord(id=f"r{i}-{k}", arrived_s=t, engine_queued_s=t + d * 0.5,
                                         num_images=1, image_tokens=256))
        t += d
        steps.append(EngineStep(t_s=t, duration_s=d, decode_tokens=dec, decode_requests=dec))
    counted = with_image_arrivals(steps, records, [(0, len(steps))], [(0, len(records))])
    assert sum(s.image_arrivals for s in counted) == len(records)
    assert all(s.image_arrivals == round((s.duration_s - 0.002 - 1e-4 * s.decode_tokens) / 0.016)
               for s in counted)
    for platform, want in (("gpu", 0.016), ("cpu", 0.0)):
        engine = {"platform": platform, "kv_cache_tokens": KV_TOKENS, "max_num_seqs": 64,
                  "max_num_batched_tokens": 8192, "block_size": 16}
        cal = calibrate_traces(TraceData(records=[], steps=counted, meta={"engine": engine},
                                         runs=[(0, len(counted))], record_runs=[(0, 0)]))
        assert cal.step is not None
        assert cal.step.per.get("image_arrivals", 0.0) == pytest.approx(want, rel=0.02, abs=1e-9)


def test_read_traces_counts_each_steps_image_arrivals_from_its_own_trace(tmp_path: Path) -> None:
    from sim.fit.traces import read_traces

    paths = []
    for k, queued in enumerate(([1.05, 1.07, 1.5], [1.06])):  # the second trace: another server
        p = tmp_path / f"t{k}.jsonl"
        with TraceWriter(p, TraceHeader(producer="edgeserve serve")) as w:
            for i, q in enumerate(queued):
                w.write(RequestRecord(id=f"r{i}", arrived_s=q - 0.01, engine_queued_s=q,
                                      num_images=1, image_tokens=64))
            w.write(RequestRecord(id="text", arrived_s=1.0, engine_queued_s=1.08))
            w.write(EngineStep(t_s=1.1, duration_s=0.1, decode_tokens=1))  # (1.0, 1.1]
            w.write(EngineStep(t_s=1.2, duration_s=0.1, decode_tokens=1))  # (1.1, 1.2]
        paths.append(p)
    data = read_traces(paths)
    assert [s.image_arrivals for s in data.steps] == [2, 0, 1, 0]


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_a_gpu_steps_prefill_cost_is_fitted_apart_from_its_decode_slope(platform: str) -> None:
    # an H100-like engine: decode-only steps 2 ms + 10 µs per sequence, a step computing prompt
    # tokens 3.5 ms more and 0.15 ms more per decoder beside it (a piecewise CUDA graph instead
    # of a whole one), timed by output intervals (8-step windows). Decode-only runs at depth come
    # from decode waves; without the two terms the decode slope takes up the prefills' cost
    from sim.fit.traces import TraceData

    rng = np.random.default_rng(11)
    steps, t = [], 0.0
    for _ in range(600):  # runs of steps at one depth, some with a prefill now and then
        dec, p_prefill = int(rng.choice([1, 4, 16, 32, 64])), float(rng.choice([0.0, 0.1, 0.6]))
        for _ in range(16):
            prefill = int(rng.integers(20, 400)) if rng.random() < p_prefill else 0
            d = 0.002 + 1e-5 * dec + 2e-6 * prefill + (0.0035 + 1.5e-4 * dec if prefill else 0.0)
            t += d
            steps.append(EngineStep(t_s=t, duration_s=d, prefill_tokens=prefill,
                                    prefill_requests=int(prefill > 0), decode_tokens=dec,
                                    decode_requests=dec))
    engine = {"platform": platform, "kv_cache_tokens": KV_TOKENS, "max_num_seqs": 64,
              "max_num_batched_tokens": 8192, "block_size": 16,
              "step_timing": "output_interval"}
    cal = calibrate_traces(TraceData(records=[], steps=steps, meta={"engine": engine},
                                     runs=[(0, len(steps))], record_runs=[(0, 0)]))
    assert cal.step is not None
    per = cal.step.per
    if platform == "gpu":
        assert per["prefill_step"] == pytest.approx(0.0035, rel=0.02)
        assert per["decode_beside_prefill"] == pytest.approx(1.5e-4, rel=0.02)
        assert per["decode_tokens"] == pytest.approx(1e-5, rel=0.05)
    else:  # fitted only on a GPU: on the CPU the slope takes the prefills' share up
        assert "prefill_step" not in per and "decode_beside_prefill" not in per
        assert per["decode_tokens"] > 3e-5


def test_vllm_input_processing_leaves_out_a_first_step_whose_span_was_not_measured() -> None:
    # a GPU's steps are timed by output intervals: after an idle engine the first step has no
    # earlier output to be timed from (span ~0), so its work lies inside the wait from the
    # hand-over to its output — 25 ms of input processing and a 35 ms image step here
    from sim.fit.stage_fits import fit_input_processing, input_processing_rows

    records, steps = [], []
    for i in range(30):
        q = 10.0 * i
        records.append(RequestRecord(id=f"r{i}", arrived_s=q - 0.1, engine_queued_s=q,
                                     first_token_s=q + 0.060, num_images=1, image_tokens=1000,
                                     target_width=896, target_height=896 + 28 * (i % 3)))
        steps.append(EngineStep(t_s=q + 0.060, duration_s=0.0005, prefill_tokens=1020,
                                prefill_requests=1, encoder_tokens=1000, encoder_inputs=1))
    rows = input_processing_rows(records, steps)
    assert rows is not None
    plain = fit_input_processing(rows)
    assert plain.base_s == pytest.approx(0.0595, abs=1e-6)  # the step counted as processing
    rows = input_processing_rows(records, steps, lambda s: 0.035)
    assert rows is not None
    less_step = fit_input_processing(rows)
    assert less_step.base_s == pytest.approx(0.025, abs=1e-6)
    assert sum(less_step.per.values()) == pytest.approx(0.0, abs=1e-12)


def test_an_input_processing_slope_the_idle_requests_do_not_identify_is_dropped_with_a_line() -> None:
    # the wait at an idle engine is 30 ms ± 10 ms, 1 ms more per megapixel: far inside the noise
    # of 80 requests, so the slope is not identified and is dropped; +20 ms per megapixel is kept
    from sim.fit.identify import identify_rows
    from sim.fit.stage_fits import fit_input_processing, input_processing_rows

    for slope, noise_s, kept in ((1e-9, 0.010, False), (2e-8, 0.005, True)):
        records, steps = [], []
        for i in range(80):
            # sizes in turn, a ± noise_s swing on every other request: apart from the size
            q, side = 10.0 * i, (448, 896, 1344)[i % 3]
            wait = 0.030 + slope * side * side + noise_s * (1 if i % 2 else -1)
            records.append(RequestRecord(id=f"r{i}", arrived_s=q - 0.1, engine_queued_s=q,
                                         first_token_s=q + wait + 0.01, num_images=1,
                                         image_tokens=side * side // 784, target_width=side,
                                         target_height=side))
            steps.append(EngineStep(t_s=q + wait + 0.01, duration_s=0.01, prefill_tokens=300,
                                    prefill_requests=1, encoder_tokens=256, encoder_inputs=1))
        rows = input_processing_rows(records, steps)
        assert rows is not None
        notes: list[str] = []
        fit, u = identify_rows(rows, fit_input_processing(rows), "input_processing", notes)
        if kept:
            assert fit.per["target_pixels"] == pytest.approx(2e-8, rel=0.1) and not notes
            lo, hi = u.terms["target_pixels"].interval
            assert 0 < lo < 2e-8 < hi
        else:
            assert "target_pixels" not in fit.per and "target_pixels" in u.dropped
            assert notes and notes[0].startswith("input_processing term target_pixels dropped")
            assert fit.base_s == pytest.approx(0.031, abs=0.003)
