"""The vLLM V1 step engine: exact timelines of chunked prefill, mixed steps, limits and KV blocks.

Unless a test says otherwise, a step costs 0.1 s + 1 ms per prefill token + 10 ms per decode
token (context and encoder tokens free), the budget is 1000 tokens per step and KV blocks hold
100 tokens. Timelines are ``(request, queued, first token, last token)``; steps are
``(start, duration, prefill tokens, decode tokens, context tokens, encoder tokens)``.
"""

from __future__ import annotations

import copy
import math
import statistics
from typing import Any

import pytest

from edgeserve.records import Outcome, RequestRecord
from sim.core.batching import BatchEngine
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.simulation import Simulation
from sim.core.step_engine import StepEngine
from sim.scenario.config import PROFILE_DIR, load_scenario, scenario_from_raw
from sim.scenario.profiles import StepTimeModel
from sim.scenario.schema import ConfigError, load_yaml
from tests.sim.conftest import one_core_profile

PER = {"prefill_tokens": 0.001, "decode_tokens": 0.01, "context_tokens": 0.0,
       "encoder_tokens": 0.0}


def model(**kw: Any) -> StepTimeModel:
    args: dict[str, Any] = {"base_s": 0.1, "per": PER, "max_num_batched_tokens": 1000,
                            "max_num_seqs": 8, "block_size_tokens": 100}
    args.update(kw)
    return StepTimeModel(**args)


def job(name: str, t: float, prompt: int, out: int, image: int = 0, cached: int = 0) -> Job:
    return Job(RequestRecord(id=name, arrived_s=t), None, 0, 0, image, prompt, out, cached)


class Run:
    """One engine fed ``jobs`` at their arrival times; :meth:`run` runs it to the end."""

    def __init__(self, jobs: list[Job], m: StepTimeModel | None = None, kv_tokens: int = 100_000,
                 encoder_in_step: bool = False) -> None:
        self.loop = loop = EventLoop()
        self.log: list[tuple[Any, ...]] = []
        self.errors: list[str | None] = []
        self.steps: list[tuple[float, ...]] = []
        self.jobs = jobs
        self.engine = e = StepEngine(loop, "e", m or model(), kv_tokens, self._done,
                                     encoder_in_step=encoder_in_step)
        e.on_step = lambda s: self.steps.append((round(s.start_s, 9), round(s.duration_s, 9),
                                                 *s[2:]))
        for j in jobs:
            loop.at(j.rec.arrived_s, lambda j: e.submit(j), j)

    def run(self) -> Run:
        self.loop.run_until(1000.0)
        return self

    def _done(self, j: Job) -> None:
        r = j.rec
        if r.outcome is not Outcome.OK:
            self.log.append((r.id, r.outcome.value))
            self.errors.append(r.error)
            return
        self.log.append((r.id, r.engine_queued_s, round(r.first_token_s or 0.0, 9),
                         round(r.last_token_s or 0.0, 9)))


def test_a_prompt_longer_than_the_budget_is_chunked_and_its_first_token_ends_the_last_chunk() -> None:
    # 2500 tokens in chunks of 1000, 1000, 500 (1.1 + 1.1 + 0.6 s), then 2 decode steps of 0.11 s
    r = Run([job("a", 0.0, 2500, 3)]).run()
    assert r.log == [("a", 0.0, 2.8, 3.02)]
    assert r.steps == [
        (0.0, 1.1, 1000, 0, 1000, 0),
        (1.1, 1.1, 1000, 0, 2000, 0),
        (2.2, 0.6, 500, 0, 2500, 0),
        (2.8, 0.11, 0, 1, 2501, 0),
        (2.91, 0.11, 0, 1, 2502, 0),
    ]


def test_decode_tokens_ride_in_the_steps_of_another_requests_prefill_chunks() -> None:
    # a's prompt is one step (0.2 s). b arrives during it and starts at the next step boundary:
    # each of its two chunks (999 = budget − a's decode token, then 501) shares its step with a
    # decode token of a, which pays for both (0.1 + 0.999 + 0.01, 0.1 + 0.501 + 0.01). Decoding
    # never pauses: a gets a token every step, and both finish in the first all-decode step.
    r = Run([job("a", 0.0, 100, 4), job("b", 0.15, 1500, 2)]).run()
    assert r.steps == [
        (0.0, 0.2, 100, 0, 100, 0),
        (0.2, 1.109, 999, 1, 101 + 999, 0),
        (1.309, 0.611, 501, 1, 102 + 1500, 0),
        (1.92, 0.12, 0, 2, 103 + 1501, 0),
    ]
    assert r.log == [("a", 0.0, 0.2, 2.04), ("b", 0.15, 1.92, 2.04)]


def test_recorded_token_times_are_the_ends_of_the_steps_each_token_rode_in() -> None:
    # the timeline above: a's tokens come at the ends of steps 1-4, b's at the ends of 3 and 4, so
    # a's gaps are the long steps carrying b's chunks, not its mean time per output token
    r = Run([job("a", 0.0, 100, 4), job("b", 0.15, 1500, 2)])
    r.engine.record_token_times = True
    r.run()
    rec = {j.rec.id: j.rec for j in r.jobs}
    assert [round(t, 9) for t in rec["a"].token_times_s] == [0.2, 1.309, 1.92, 2.04]
    assert [round(t, 9) for t in rec["b"].token_times_s] == [1.92, 2.04]
    assert [round(x, 9) for x in rec["a"].itl_s()] == [1.109, 0.611, 0.12]
    # off (the default), records carry no token times
    assert all(not j.rec.token_times_s for j in Run([job("c", 0.0, 100, 4)]).run().jobs)


def test_short_prompts_share_one_step_up_to_the_budget_in_arrival_order() -> None:
    # a, b and c arrive together: a (600) and the first 400 tokens of b fill step 1; b's last 200
    # and c (300) share step 2 with a's first decode token.
    r = Run([job("a", 0.0, 600, 2), job("b", 0.0, 600, 2), job("c", 0.0, 300, 2)]).run()
    assert [s[2:4] for s in r.steps] == [(1000, 0), (500, 1), (0, 2)]
    assert r.log == [("a", 0.0, 1.1, 1.71), ("b", 0.0, 1.71, 1.83), ("c", 0.0, 1.71, 1.83)]


def test_max_num_seqs_caps_the_running_set_and_the_next_request_waits_for_a_finish() -> None:
    r = Run([job("a", 0.0, 100, 3), job("b", 0.0, 100, 2)], model(max_num_seqs=1)).run()
    assert r.log == [("a", 0.0, 0.2, 0.42), ("b", 0.0, 0.62, 0.73)]
    assert [s[2:4] for s in r.steps] == [(100, 0), (0, 1), (0, 1), (100, 0), (0, 1)]


def test_a_prefix_cache_hit_is_not_computed() -> None:
    # 1200 of 2500 prompt tokens cached: 1300 computed (1000 + 300), 1.3 s sooner than uncached;
    # attention still reads the cached prefix (context from 2200)
    r = Run([job("a", 0.0, 2500, 3, cached=1200)]).run()
    assert r.log == [("a", 0.0, 1.5, 1.72)]
    assert r.steps[:2] == [(0.0, 1.1, 1000, 0, 2200, 0), (1.1, 0.4, 300, 0, 2500, 0)]
    # a prompt found whole in the cache still computes its last token (as vLLM does)
    whole = Run([job("w", 0.0, 2500, 1, cached=2500)]).run()
    assert whole.steps == [(0.0, 0.101, 1, 0, 2500, 0)]
    assert whole.log == [("w", 0.0, 0.101, 0.101)]


def test_a_request_whose_kv_blocks_do_not_fit_waits_until_blocks_are_freed() -> None:
    # 1000 tokens of KV = 10 blocks of 100. a needs 5 (450 + 3 tokens), b 6 (500 + 20): b waits
    # although step 1 has budget left, and starts in the step after a's last token.
    r = Run([job("a", 0.0, 450, 3), job("b", 0.0, 500, 20)], kv_tokens=1000)
    probe: list[tuple[int, int]] = []
    r.loop.at(0.1, lambda _: probe.append((len(r.engine.waiting), r.engine.kv_used)))
    r.run()
    assert probe == [(1, 500)]  # b waits; a holds its 5 blocks
    assert r.log == [("a", 0.0, 0.55, 0.77), ("b", 0.0, 1.37, round(1.37 + 19 * 0.11, 9))]
    assert r.engine.kv_used == 0


def test_a_sequence_larger_than_the_whole_cache_fails_with_a_reason() -> None:
    # 1050 tokens of KV are 10 whole blocks; 950 + 60 tokens need 11
    r = Run([job("big", 0.0, 950, 60)], kv_tokens=1050).run()
    assert r.log == [("big", "failed")] and r.steps == []
    assert r.errors == ["sequence of 1010 tokens (11 blocks of 100) exceeds the KV cache "
                        "(1050 tokens) of e"]
    assert r.engine.kv_used == 0


@pytest.mark.parametrize(("in_step", "first", "last", "encoder"), [
    (True, 4.1, 4.21, [1200, 0, 0]),  # the encoder runs in the step of the first chunk only
    (False, 1.7, 1.81, [0, 0, 0]),  # encoded on its own unit before the request got here
])
def test_encoder_tokens_are_charged_in_the_step_of_the_first_chunk(
        in_step: bool, first: float, last: float, encoder: list[int]) -> None:
    # 2 ms per image token: step 1 = 0.1 + 1000 × 1 ms + 1200 × 2 ms = 3.5 s when encoding in it
    per = {**PER, "encoder_tokens": 0.002}
    r = Run([job("a", 0.0, 1500, 2, image=1200)], model(per=per), encoder_in_step=in_step).run()
    assert r.log == [("a", 0.0, first, last)]
    assert [s[5] for s in r.steps] == encoder


def test_the_vision_tower_costs_the_square_of_an_images_tokens_too() -> None:
    # 1 µs per image token squared: a 400-token image adds 0.16 s to its step, a 800-token one
    # 0.64 s (4×, not 2×): 0.1 + 0.5 + 0.16 = 0.76 and 0.1 + 0.9 + 0.64 = 1.64
    per = {**PER, "encoder_tokens_sq": 1e-6}
    r = Run([job("a", 0.0, 500, 1, image=400), job("b", 5.0, 900, 1, image=800)],
            model(per=per), encoder_in_step=True).run()
    assert r.log == [("a", 0.0, 0.76, 0.76), ("b", 5.0, 6.64, 6.64)]


def test_a_step_encoding_two_images_pays_their_cross_term_beyond_each_image_alone() -> None:
    # 1 µs per image token² and 0.5 µs per cross token² ((Σ tokens)² − Σ tokens²): a and b arrive
    # together, their 200- and 300-token images fit one step's encoder budget (1000): the step
    # costs 0.1 + 0.6 (prompts) + 1e-6·(200² + 300²) + 0.5e-6·(500² − 200² − 300²)
    # = 0.7 + 0.13 + 0.06 = 0.89 s; c's image, alone in its step later, pays no cross term
    per = {**PER, "encoder_tokens_sq": 1e-6, "encoder_tokens_cross": 0.5e-6}
    r = Run([job("a", 0.0, 250, 1, image=200), job("b", 0.0, 350, 1, image=300),
             job("c", 5.0, 350, 1, image=300)], model(per=per), encoder_in_step=True).run()
    assert r.log == [("a", 0.0, 0.89, 0.89), ("b", 0.0, 0.89, 0.89), ("c", 5.0, 5.54, 5.54)]
    assert [s[5] for s in r.steps] == [500, 300]


def test_an_image_beyond_the_steps_encoder_budget_waits_for_the_next_step() -> None:
    # encoder budget = token budget (1000, as vLLM's max_num_encoder_input_tokens): a's 600-token
    # image fills it enough that b's 600 waits, though b's 100 prompt tokens would fit; b is
    # prefilled in the next step, beside a's decode token
    r = Run([job("a", 0.0, 200, 2, image=600), job("b", 0.0, 100, 1, image=600)],
            encoder_in_step=True).run()
    assert [s[2:4] + s[5:] for s in r.steps] == [(200, 0, 600), (100, 1, 600)]
    assert r.log == [("a", 0.0, 0.3, 0.51), ("b", 0.0, 0.51, 0.51)]


def test_a_small_image_passes_a_large_one_the_encoder_budget_holds_back_as_vllm_schedules() -> None:
    # a, b, c, d arrive together (images 600, 600, 300, 600; encoder budget 1000). Step 1 encodes
    # a's image; b's does not fit beside it, so vLLM admits b without it and goes on: c's 300 fits
    # (900), d's does not. Step 2 runs b (admitted before d) beside a's decode token, step 3 d.
    r = Run([job("a", 0.0, 200, 2, image=600), job("b", 0.0, 200, 1, image=600),
             job("c", 0.0, 100, 1, image=300), job("d", 0.0, 200, 1, image=600)],
            encoder_in_step=True).run()
    assert [s[2:4] + s[5:] for s in r.steps] == [(300, 0, 900), (200, 1, 600), (200, 0, 600)]
    assert r.log == [("c", 0.0, 0.4, 0.4), ("a", 0.0, 0.4, 0.71), ("b", 0.0, 0.71, 0.71),
                     ("d", 0.0, 1.01, 1.01)]
    assert r.engine.in_flight() == 0 and r.engine.kv_used == 0


def test_a_clock_change_stretches_the_steps_started_after_it() -> None:
    # steps of 0.2 (prefill), then 0.11 each; at 0.25 the clock slows to scale 2: the running
    # step keeps its end (0.31), the two after it take 0.22 s.
    r = Run([job("a", 0.0, 100, 4)])
    r.loop.at(0.25, lambda _: r.engine.retime(2.0))
    r.run()
    assert [s[:2] for s in r.steps] == [(0.0, 0.2), (0.2, 0.11), (0.31, 0.22), (0.53, 0.22)]
    assert r.log == [("a", 0.0, 0.2, 0.75)]


def test_context_tokens_price_the_kv_the_step_reads() -> None:
    # 1 µs per context token: the decode steps of a 1000-token prompt read 1001, 1002 tokens
    per = {**PER, "context_tokens": 1e-6}
    r = Run([job("a", 0.0, 1000, 3)], model(per=per)).run()
    assert [s[1] for s in r.steps] == [1.101, 0.111001, 0.111002]


def test_busy_accounting_brackets_the_steps() -> None:
    loop = EventLoop()
    busy: list[tuple[float, int]] = []
    e = StepEngine(loop, "e", model(), 10_000, lambda j: None,
                   lambda d: busy.append((round(loop.now, 9), d)))
    loop.at(0.0, lambda _: e.submit(job("a", 0.0, 100, 2)))
    loop.at(5.0, lambda _: e.submit(job("b", 5.0, 100, 1)))
    loop.run_until(100.0)
    assert busy == [(0.0, 1), (0.31, -1), (5.0, 1), (5.2, -1)]
    assert e.steps == 3 and e.in_flight() == 0 and e.load == 0


def test_step_noise_has_the_model_mean_and_spread_and_is_reproducible() -> None:
    def run() -> list[float]:
        r = Run([job("a", 0.0, 1, 4001)], model(cv=0.2, per={})).run()
        return [s[1] for s in r.steps]

    steps = run()
    assert steps == run()
    assert statistics.fmean(steps) == pytest.approx(0.1, rel=0.02)
    assert statistics.stdev(steps) / statistics.fmean(steps) == pytest.approx(0.2, rel=0.1)


def test_the_drift_makes_nearby_steps_slow_together_with_the_fitted_spread_and_time() -> None:
    # a 4000-token decode stream of 0.1 s steps under a drift of sd 0.2, τ = 2 s and no own
    # noise: log(step / 0.1) + sd²/2 is the OU process itself — stationary sd 0.2, and steps
    # 1 s apart (10 steps) correlate by exp(−1/2) = 0.61, steps 10 s apart by exp(−5) ≈ 0
    r = Run([job("a", 0.0, 1, 4001)], model(per={}, drift_sd=0.2, drift_tau_s=2.0)).run()
    x = [math.log(s[1] / 0.1) + 0.02 for s in r.steps]
    assert statistics.pstdev(x) == pytest.approx(0.2, rel=0.15)

    def corr(lag: int) -> float:
        return statistics.correlation(x[:-lag], x[lag:])

    assert corr(10) == pytest.approx(math.exp(-0.5), abs=0.08)
    assert abs(corr(100)) < 0.1
    assert statistics.fmean(s[1] for s in r.steps) == pytest.approx(0.1, rel=0.05)


def test_a_fresh_server_starts_at_the_drift_start_and_relaxes_to_its_usual_speed() -> None:
    # drift_start = log 1.5: the first step takes 0.1 × 1.5 × exp(−sd²/2) exactly; a stream's
    # mean slowdown over its first τ is well above its later one (τ = 1 s, 0.1 s steps)
    r = Run([job("a", 0.0, 1, 2001)],
            model(per={}, drift_sd=0.01, drift_tau_s=1.0, drift_start=math.log(1.5))).run()
    assert r.steps[0][1] == pytest.approx(0.15 * math.exp(-0.5e-4), abs=1e-9)
    early = statistics.fmean(s[1] for s in r.steps[:5])
    late = statistics.fmean(s[1] for s in r.steps[100:])
    assert early > 0.13 and late == pytest.approx(0.1, rel=0.02)


def test_a_shape_run_the_first_time_is_slower_by_the_cold_factor() -> None:
    # cold_shape_factor 0.5: a's 100-token prefill is the first of its length (0.2 s → 0.3 s) and
    # b's identical one is not (0.2 s); c's 300-token prefill is new again (0.4 → 0.6); decode
    # steps of a seen batch are not (their prefill count is 0)
    r = Run([job("a", 0.0, 100, 1), job("b", 1.0, 100, 1), job("c", 2.0, 300, 1)],
            model(cold_shape_factor=0.5)).run()
    assert [s[:2] for s in r.steps] == [(0.0, 0.3), (1.0, 0.2), (2.0, 0.6)]


def test_a_new_image_size_is_cold_even_at_a_seen_prefill_length() -> None:
    # same 500-token prompts; a's 400-token image is new (cold), b's 400 is not, c's 300 is
    per = {**PER, "encoder_tokens": 0.0}
    r = Run([job("a", 0.0, 500, 1, image=400), job("b", 5.0, 500, 1, image=400),
             job("c", 10.0, 500, 1, image=300)],
            model(per=per, cold_shape_factor=1.0), encoder_in_step=True).run()
    assert [s[1] for s in r.steps] == [1.2, 0.6, 1.2]


def test_the_estimate_counts_queued_prompt_tokens_and_decode_steps() -> None:
    loop = EventLoop()
    e = StepEngine(loop, "e", model(), 100_000, lambda j: None)
    # idle: one 0.1 + 0.5 s prefill step, then 9 decode steps of 0.1 + 0.01 s
    assert e.estimate_s(job("x", 0.0, 500, 10)) == pytest.approx(0.6 + 9 * 0.11)
    e.submit(job("a", 0.0, 2500, 2))
    loop.run_until(0.5)  # the first of a's three chunks is running (until 1.1)
    est = e.estimate_s(job("x", 0.5, 500, 10))
    # the rest of this step, 1500 + 500 tokens to prefill in 2 steps, 9 steps decoding beside a
    assert est == pytest.approx(0.6 + (2 * 0.1 + 2.0) + 9 * (0.1 + 2 * 0.01))


# ---- profiles and whole simulations ---------------------------------------------------------
STEP = {"base_s": 0.018, "per": {"prefill_tokens": 6.0e-4, "decode_tokens": 0.002,
                                 "context_tokens": 2.0e-7, "encoder_tokens": 0.0},
        "cv": 0.0, "max_num_batched_tokens": 2048, "max_num_seqs": 8, "block_size_tokens": 128}


def jetson_run(step: dict[str, Any] | None) -> Simulation:
    """One Jetson (its profile, optionally with ``llm.step``) at 0.5 requests/s, all local."""
    prof = load_yaml(PROFILE_DIR / "jetson-orin-nano.yaml")
    if step is not None:
        prof["llm"]["step"] = copy.deepcopy(step)
    return Simulation(scenario_from_raw({
        "name": "step", "seed": 2, "requests": 400, "policy": {"kind": "always_local"},
        "devices": [{"name": "j", "profile": prof,
                     "workload": {"kind": "poisson", "rate_hz": 0.5, "text_tokens": 24,
                                  "output_tokens": [16, 48]}}],
    }))


def test_a_device_profile_with_llm_step_runs_on_a_step_engine() -> None:
    sim = jetson_run(STEP)
    engine = sim.devices[0].engine
    assert isinstance(engine, StepEngine)
    assert not engine.encoder_in_step  # the Jetson encodes on its GPU stage, before the engine
    recs: list[RequestRecord] = []
    sim.add_record_sink(recs.append)
    s = sim.run()
    assert len(recs) == 400 and all(r.outcome is Outcome.OK for r in recs)
    assert all(r.engine_queued_s <= r.first_token_s <= r.last_token_s == r.finished_s  # type: ignore[operator]
               for r in recs)
    assert engine.in_flight() == 0 and engine.kv_used == 0 and not engine.busy
    # the same workload on the profile's BatchEngine, whose prefill and decode-step models the
    # step model above mirrors: at this light load both engines give similar latencies
    base = jetson_run(None)
    assert isinstance(base.devices[0].engine, BatchEngine)
    b = base.run()
    d, bd = s.devices[0], b.devices[0]
    assert d.ok == bd.ok == 400
    assert d.ttft_p50_s == pytest.approx(bd.ttft_p50_s, rel=0.1)
    assert d.e2e_p50_s == pytest.approx(bd.e2e_p50_s, rel=0.1)
    assert d.throughput_rps == pytest.approx(bd.throughput_rps, rel=0.05)
    assert engine.steps > 400  # one event per step: at least one per request


def test_a_device_without_an_encode_stage_encodes_inside_the_first_step() -> None:
    # one core, free CPU stages: the request reaches the engine on arrival; its one prefill step
    # computes the whole prompt (text + image tokens) and encodes the image, then 2 decode steps
    step = {"base_s": 0.1, "per": {**PER, "encoder_tokens": 0.002}}
    sim = Simulation(scenario_from_raw({
        "name": "enc", "seed": 1, "requests": 1, "policy": {"kind": "always_local"},
        "devices": [{"name": "d", "profile": one_core_profile(llm={"step": step}),
                     "workload": {"output_tokens": [3, 3]}}],
    }))
    engine = sim.devices[0].engine
    assert isinstance(engine, StepEngine) and engine.encoder_in_step
    recs: list[RequestRecord] = []
    sim.add_record_sink(recs.append)
    sim.run()
    (r,) = recs
    assert r.engine_queued_s == r.arrived_s and r.prompt_tokens == 32 + r.image_tokens
    first = 0.1 + 0.001 * r.prompt_tokens + 0.002 * r.image_tokens
    assert r.first_token_s == pytest.approx(r.arrived_s + first, abs=1e-9)
    assert r.last_token_s == pytest.approx(r.first_token_s + 2 * 0.11, abs=1e-9)


def test_a_cloud_server_with_a_step_model_runs_step_engines() -> None:
    sc = load_scenario(None, [("cloud[0].profile.server.step", dict(STEP, max_num_seqs=64)),
                              ("requests", 300), ("duration_s", None)])
    sim = Simulation(sc, policy="always_cloud")
    replicas = sim.clouds["l4"].replicas
    assert all(isinstance(e, StepEngine) and e.encoder_in_step for e in replicas)
    s = sim.run()
    assert s.fleet.ok + s.fleet.failed == 300 and s.fleet.ok > 250  # (a lossy link fails a few)
    assert s.fleet.ttft_p50_s > 0


@pytest.mark.parametrize(("key", "value", "message"), [
    ("devices[0].profile.llm.step.per.prefill_tokens", -1.0,
     "scenario.devices[0].profile.llm.step.per.prefill_tokens: must be >= 0"),
    ("devices[0].profile.llm.step.per.tokens", 1e-3,
     "scenario.devices[0].profile.llm.step.per.tokens: unknown feature"),
    ("devices[0].profile.llm.step.max_num_seqs", 0,
     "scenario.devices[0].profile.llm.step.max_num_seqs: must be > 0"),
    ("devices[0].profile.llm.step.max_num_batched_tokens", 4,
     "scenario.devices[0].profile.llm.step.max_num_batched_tokens: must be >= max_num_seqs (16)"),
    ("devices[0].profile.llm.step.block", 16,
     "scenario.devices[0].profile.llm.step.block: unknown field"),
    ("cloud[0].profile.server.step.cv", -0.1,
     "scenario.cloud[0].profile.server.step.cv: must be >= 0"),
    ("cloud[0].profile.server.step.drift_sd", 0.1,
     "scenario.cloud[0].profile.server.step.drift_tau_s: give drift_sd and drift_tau_s both"),
    ("cloud[0].profile.server.step.cold_shape_factor", -1,
     "scenario.cloud[0].profile.server.step.cold_shape_factor: must be >= 0"),
])
def test_bad_step_fields_are_named(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [(key, value)])
    assert str(e.value).startswith(message)


def test_a_prefill_beside_decoders_pays_for_their_context() -> None:
    # 1 µs per prompt token per token of context the others hold (vLLM's CPU backend attends a
    # prefill over the whole batch's keys): b's 300-token prompt joins a, which holds its 500
    # prompt tokens and the ones it decoded, so b's step costs 0.1 + 0.3 + 0.01 (a's token)
    # + 1e-6 · 300 · a's context; the same prompt alone on the engine (c, later) pays nothing
    per = {**PER, "prefill_x_context": 1e-6}
    r = Run([job("a", 0.0, 500, 6), job("b", 0.65, 300, 1), job("c", 5.0, 300, 1)],
            model(per=per)).run()
    mixed = [s for s in r.steps if s[2] and s[3]]
    assert len(mixed) == 1
    _start, dur, prefill, n_dec, ctx, _enc = mixed[0]
    assert (prefill, n_dec) == (300, 1)
    held_by_a = ctx - prefill
    assert 500 < held_by_a <= 506  # a's prompt and the tokens it has decoded so far
    assert dur == pytest.approx(0.1 + 0.3 + 0.01 + 1e-6 * 300 * held_by_a)
    alone = [s for s in r.steps if s[0] >= 5.0]
    assert alone[0][1] == pytest.approx(0.4)  # c's prefill: nothing else held


def test_an_image_request_arriving_mid_step_lengthens_that_step_and_one_arriving_idle_the_next() -> None:
    # image_arrivals 0.05 s: vLLM's engine takes each image request in on its CPU beside the step
    # loop (a GPU's steps grew by that per image request arriving during them)
    m = model(per={**PER, "image_arrivals": 0.05})
    # "a" arrives at an idle engine: its own first step (0.1 + 0.1 s of prefill) takes the 0.05 s
    # too; "b" arrives during a's second step (decode, 0.11 s from 0.25), which then ends 0.05 s
    # later, at 0.41 (the step's record keeps the 0.11 s planned at its start); "c", text only,
    # arrives during the step b's prefill runs in and costs nothing
    r = Run([job("a", 0.0, 100, 3, image=64), job("b", 0.3, 100, 2, image=64),
             job("c", 0.45, 100, 2)], m, encoder_in_step=True).run()
    assert r.steps[:3] == [(0.0, 0.25, 100, 0, 100, 64), (0.25, 0.11, 0, 1, 101, 0),
                           (0.41, 0.21, 100, 1, 202, 64)]
    # the step the arrival fell in ends later: a's second token at 0.25 + 0.11 + 0.05
    assert r.log[0][:3] == ("a", 0.0, 0.25)
    assert r.steps[2][0] == pytest.approx(0.41)
    # without the term the same requests run as before
    r0 = Run([job("a", 0.0, 100, 3, image=64), job("b", 0.3, 100, 2, image=64),
              job("c", 0.45, 100, 2)], encoder_in_step=True).run()
    assert r0.steps[:2] == [(0.0, 0.2, 100, 0, 100, 64), (0.2, 0.11, 0, 1, 101, 0)]


def test_a_step_computing_prompt_tokens_pays_the_prefill_step_terms_and_a_decode_only_one_does_not() -> None:
    # prefill_step 0.05 s and decode_beside_prefill 0.02 s per decoder: on a GPU a decode-only
    # batch is one CUDA graph, a batch holding a prefill runs piecewise
    m = model(per={**PER, "prefill_step": 0.05, "decode_beside_prefill": 0.02})
    # "a" alone: its prefill step (0.1 + 0.1 + 0.05); "b" arrives while a decodes, and the step
    # carrying b's prefill beside a's decode also pays 0.02 for a; a's decode-only steps do not
    r = Run([job("a", 0.0, 100, 4), job("b", 0.3, 100, 2)], m).run()
    assert r.steps[0][1] == pytest.approx(0.1 + 0.1 + 0.05)
    assert r.steps[1][1] == pytest.approx(0.1 + 0.01)  # a decoding alone
    mixed = [s for s in r.steps if s[2] and s[3]]
    assert len(mixed) == 1
    _start, dur, prefill, n_dec, _ctx, _enc = mixed[0]
    assert (prefill, n_dec) == (100, 1)
    assert dur == pytest.approx(0.1 + 0.1 + 0.01 + 0.05 + 0.02)
    assert all(s[1] == pytest.approx(0.1 + 0.01 * s[3]) for s in r.steps if not s[2])
