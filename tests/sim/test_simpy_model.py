"""The SimPy specification (sim/simpy_model.py) and the fast engine give every request one timeline.

The property: for random small scenarios — arrival processes and rates, image sizes, output
lengths, worker counts, encoder placement, ``max_num_seqs``, token budgets, KV caches, step noise,
DVFS levels and thermal trips — the plain SimPy model and :class:`sim.core.simulation.Simulation` put
every request on the same core and stamp every stage at the same time: bit for bit nearly always,
within 1e-9 s always (the SimPy model reaches an arrival's absolute time as ``now + (t − now)``,
which may round by an ulp, and sums the busy units' power afresh where the fast engine keeps a
running sum). Then exact timelines on small systems, in the style of ``test_step_engine.py``.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest

from edgeserve.records import RequestRecord
from sim.core.simpy_model import Model, step_cost_s
from sim.core.simulation import Simulation
from sim.core.step_engine import Step, StepEngine
from sim.scenario.config import Scenario, scenario_from_raw
from sim.scenario.schema import ConfigError
from tests.sim.conftest import one_core_profile

STAMPS = ("arrived_s", "preproc_queued_s", "preproc_start_s", "decode_end_s", "resize_end_s",
          "normalize_end_s", "encode_end_s", "preproc_end_s", "engine_queued_s", "first_token_s",
          "last_token_s", "finished_s")
TOL_S = 1e-9


def timelines(records: list[RequestRecord]) -> dict[str, tuple[Any, ...]]:
    return {r.id: (r.outcome.value, r.error, r.worker, r.prefix_id,
                   *(getattr(r, f) for f in STAMPS)) for r in records}


def fast_records(scenario: Scenario) -> list[RequestRecord]:
    sim = Simulation(scenario)
    out: list[RequestRecord] = []
    sim.add_record_sink(out.append)
    sim.run()
    return out


def assert_same_timelines(scenario: Scenario) -> dict[str, tuple[Any, ...]]:
    fast = timelines(fast_records(scenario))
    spec = timelines(Model(scenario).run())
    assert fast.keys() == spec.keys()
    for rid, f in fast.items():
        s = spec[rid]
        assert f[:4] == s[:4], (rid, f, s)  # outcome, error, the core it ran on, its prefix
        for name, a, b in zip(STAMPS, f[4:], s[4:], strict=True):
            same = a == b if a is None or b is None else abs(a - b) <= TOL_S
            assert same, f"{rid} {name}: fast {a!r}, SimPy model {b!r}\nfast {f}\nspec {s}"
    return fast


def service(rng: random.Random, base_s: float, per: dict[str, float]) -> dict[str, Any]:
    kind = rng.choice(["deterministic", "exponential", "lognormal"])
    m: dict[str, Any] = {"kind": kind, "base_s": base_s, "per": per}
    if kind == "lognormal":
        m["cv"] = rng.choice([0.0, 0.3, 1.0])
    return m


def random_scenario(seed: int) -> Scenario:
    """A small random device (see the module docstring) under a random workload."""
    rng = random.Random(seed)
    workers = rng.randint(1, 4)
    units: dict[str, Any] = {
        "cpu": {"kind": "cpu", "count": workers, "idle_w": rng.uniform(0, 0.5),
                "active_w": rng.uniform(0.5, 3.0)},
        "gpu": {"kind": "gpu", "count": 1, "idle_w": rng.uniform(0, 1), "active_w": rng.uniform(1, 8)},
        "npu": {"kind": "npu", "count": rng.randint(1, 2), "idle_w": 0.1,
                "active_w": rng.uniform(0.5, 3)},
    }
    stages: dict[str, Any] = {
        "image_decode": {"unit": "cpu", "model": service(rng, rng.uniform(0.001, 0.02),
                                                         {"source_pixels": rng.uniform(0, 3e-8)})},
        "resize": {"unit": "cpu", "model": service(rng, rng.uniform(0, 0.01),
                                                   {"decoded_pixels": rng.uniform(0, 1e-8)})},
        "normalize": {"unit": "cpu", "model": service(rng, rng.uniform(0, 0.01),
                                                      {"target_pixels": rng.uniform(0, 1e-8)})},
        "prefill": {"unit": rng.choice(["gpu", "gpu", "cpu"])},
    }
    stages["decode_step"] = {"unit": stages["prefill"]["unit"]}
    where_encode = rng.choice(["step", "npu", "worker"])
    if where_encode != "step":
        stages["encode"] = {"unit": "npu" if where_encode == "npu" else "cpu",
                            "model": service(rng, rng.uniform(0.005, 0.05),
                                             {"image_tokens": rng.uniform(0, 1e-4)})}
    seqs = rng.randint(1, 8)
    block = rng.choice([16, 64, 128])
    per = {"prefill_tokens": rng.uniform(1e-5, 5e-4), "decode_tokens": rng.uniform(0, 5e-3),
           "context_tokens": rng.uniform(0, 2e-6), "encoder_tokens": rng.uniform(0, 2e-4),
           "encoder_tokens_sq": rng.uniform(0, 1e-7), "encoder_tokens_cross": rng.uniform(0, 5e-8),
           "prefill_x_context": rng.uniform(0, 1e-9)}
    step: dict[str, Any] = {"base_s": rng.uniform(0.001, 0.03), "per": per,
                            "max_num_seqs": seqs, "block_size_tokens": block,
                            "max_num_batched_tokens": rng.choice([seqs, 256, 512, 2048]),
                            "cv": rng.choice([0.0, 0.0, 0.2])}
    llm: dict[str, Any] = {"kv_capacity_tokens": rng.choice([512, 2048, 4096, 16384, 65536]),
                           "step": step, "handoff_s": rng.choice([0.0, 0.0, 0.002])}
    if rng.random() < 0.3:
        llm["input_processing"] = {"base_s": 0.001, "per": {"prompt_tokens": 1e-6}}
    r = rng.uniform(2.0, 15.0)
    ambient = rng.uniform(20, 35)
    trips = sorted(ambient + rng.uniform(0.5, 25) for _ in range(rng.randint(0, 3)))
    thermal: dict[str, Any] = {
        "r_c_per_w": r, "c_j_per_c": rng.uniform(0.05, 3.0) / r * 10, "ambient_c": ambient,
        "trips": [{"temp_c": t, "hysteresis_c": rng.uniform(0.0, 3.0)} for t in trips]}
    if rng.random() < 0.3:
        thermal["initial_c"] = ambient + rng.uniform(0, 30)
    levels = [{"scale": 1.0, "power_scale": 1.0}]
    for _ in range(rng.randint(0, 3)):
        levels.append({"scale": levels[-1]["scale"] * rng.uniform(1.1, 2.0),
                       "power_scale": levels[-1]["power_scale"] * rng.uniform(0.4, 0.9)})
    profile = {"name": f"random-{seed}", "units": units, "stages": stages, "llm": llm,
               "thermal": thermal, "dvfs": levels, "base_w": rng.uniform(0, 2)}
    sizes = [{"width": rng.randint(200, 2400), "height": rng.randint(200, 1800),
              "weight": rng.uniform(0.5, 2)} for _ in range(rng.randint(1, 3))]
    lo = rng.randint(1, 40)
    workload: dict[str, Any] = {"kind": rng.choice(["poisson", "gamma", "periodic"]),
                                "rate_hz": rng.uniform(0.5, 30.0), "cv": rng.uniform(0.5, 3.0),
                                "fps": rng.uniform(1, 15), "streams": rng.randint(1, 3),
                                "image": {"sizes": sizes}, "text_tokens": rng.randint(0, 300),
                                "output_tokens": [lo, lo + rng.randint(0, 60)]}
    if rng.random() < 0.2:  # shared prompt prefixes (a local engine keeps no prefix cache)
        workload["prefix"] = {"count": 3, "tokens": workload["text_tokens"] // 2}
    devices: list[dict[str, Any]] = [{"name": "d0", "profile": profile, "workload": workload}]
    fleet = rng.random()
    if fleet < 0.2:
        devices.append({"name": "d1", "profile": profile, "workload": workload})
    elif fleet < 0.3:  # a fleet entry: two devices, each a little different
        devices = [{"name": "f", "profile": profile, "workload": workload, "count": 2,
                    "jitter": {"rate": 0.3, "ambient_c": 3.0}}]
    limits: dict[str, Any] = {"requests": rng.randint(5, 60)}
    if rng.random() < 0.3:  # a duration (and requests as a bound, in case of a slow workload)
        limits = {"duration_s": rng.uniform(0.5, 5.0), "requests": 200}
    return scenario_from_raw({"name": f"random-{seed}", "seed": seed, **limits,
                              "sample_interval_s": 1e9, "devices": devices})


@pytest.mark.parametrize("block", range(8))
def test_random_scenarios_give_every_request_the_same_timeline_in_both_models(block: int) -> None:
    throttled = 0
    for seed in range(block * 40, (block + 1) * 40):
        scenario = random_scenario(seed)
        fast = assert_same_timelines(scenario)
        assert fast  # every scenario serves requests
        throttled += any(len(d.profile.thermal.trips) for d in scenario.devices)
    assert throttled  # the blocks exercise thermal trips too


# ---- exact timelines ----------------------------------------------------------------------------

STEP = {"base_s": 0.1, "per": {"prefill_tokens": 0.001, "decode_tokens": 0.01},
        "max_num_batched_tokens": 1000, "max_num_seqs": 8, "block_size_tokens": 100}


def device(decode_s: float, workers: int = 1, **extra: Any) -> dict[str, Any]:
    """One-core device of conftest: a ``decode_s`` image decode, then the step engine above."""
    prof = one_core_profile({"kind": "deterministic", "base_s": decode_s}, **extra)
    prof["units"]["cpu"]["count"] = workers
    prof.setdefault("llm", {"kv_capacity_tokens": 100_000, "step": STEP})
    return prof


def replay(tmp_path: Any, arrivals: list[tuple[float, int]], profile: dict[str, Any],
           text_tokens: int = 0) -> Scenario:
    """A scenario replaying ``(arrival s, output tokens)`` on one 28×28 px image (1 token)."""
    from edgeserve.records import TraceHeader, TraceWriter

    path = tmp_path / "arrivals.jsonl"
    with TraceWriter(path, TraceHeader(producer="test", clock="sim")) as w:
        for i, (t, out) in enumerate(arrivals):
            w.write(RequestRecord(id=str(i), arrived_s=t, source_width=28, source_height=28,
                                  image_tokens=1, prompt_tokens=text_tokens + 1,
                                  output_tokens=out))
    return scenario_from_raw({
        "name": "exact", "requests": len(arrivals), "sample_interval_s": 1e9,
        "devices": [{"name": "d", "profile": profile,
                     "workload": {"kind": "replay", "trace": str(path), "text_tokens": 99,
                                  "image": {"min_pixels": 28 * 28}}}]})


def stamps(records: list[RequestRecord], *fields: str) -> list[tuple[Any, ...]]:
    return sorted((r.id, *(round(getattr(r, f), 9) for f in fields)) for r in records)


def test_a_queue_for_the_core_then_steps_that_mix_prefill_and_decode(tmp_path: Any) -> None:
    # one core, 0.5 s per image; a arrives at 0, b at 0.1 and waits for the core until 0.5.
    # a's 100-token prompt is one step (0.1 + 0.1 = 0.2 s: first token 0.7), then decode steps of
    # 0.11 s (0.81, 0.92, 1.03); b, handed over at 1.0 during a step, joins at its end: its
    # prefill rides beside a's last decode token (0.1 + 0.1 + 0.01 = 0.21: 1.24), then one
    # decode step of its own (1.35)
    sc = replay(tmp_path, [(0.0, 5), (0.1, 2)], device(0.5), text_tokens=99)
    spec = Model(sc).run()
    assert stamps(spec, "preproc_start_s", "preproc_end_s", "first_token_s", "last_token_s") == [
        ("d-1", 0.0, 0.5, 0.7, 1.24),
        ("d-2", 0.5, 1.0, 1.24, 1.35),
    ]
    assert_same_timelines(sc)


def test_requests_handed_over_at_one_instant_share_the_idle_engines_first_step(
        tmp_path: Any) -> None:
    # two cores, two photos at 0: both hand over at 0.5 and ride one step (0.1 + 0.2 s), then
    # decode together (0.1 + 2 × 0.01 s)
    sc = replay(tmp_path, [(0.0, 2), (0.0, 2)], device(0.5, workers=2), text_tokens=99)
    spec = Model(sc).run()
    assert stamps(spec, "engine_queued_s", "first_token_s", "last_token_s") == [
        ("d-1", 0.5, 0.8, 0.92), ("d-2", 0.5, 0.8, 0.92)]
    assert_same_timelines(sc)


def test_cores_freed_at_one_instant_pass_to_the_waiting_requests_in_the_order_freed(
        tmp_path: Any) -> None:
    # two cores, four photos at 0: a and b start on cores 0 and 1 and free both at 0.5; c takes
    # a's core and d b's (the one freed last does not jump to the head of the line)
    sc = replay(tmp_path, [(0.0, 1)] * 4, device(0.5, workers=2), text_tokens=99)
    spec = Model(sc).run()
    assert sorted((r.id, r.worker, r.preproc_start_s) for r in spec) == [
        ("d-1", 0, 0.0), ("d-2", 1, 0.0), ("d-3", 0, 0.5), ("d-4", 1, 0.5)]
    assert_same_timelines(sc)


def test_max_num_seqs_holds_the_second_request_until_the_first_leaves(tmp_path: Any) -> None:
    # two cores: a's image is done at 0.5, b's at 0.51; one seat: b waits until a's last token
    # (0.5 + 0.2 + 0.11 = 0.81), then its own prefill step (1.01)
    prof = device(0.5, workers=2, llm={"kv_capacity_tokens": 100_000,
                                       "step": {**STEP, "max_num_seqs": 1}})
    sc = replay(tmp_path, [(0.0, 2), (0.01, 1)], prof, text_tokens=99)
    spec = Model(sc).run()
    assert stamps(spec, "engine_queued_s", "first_token_s", "last_token_s") == [
        ("d-1", 0.5, 0.7, 0.81), ("d-2", 0.51, 1.01, 1.01)]
    assert_same_timelines(sc)


def test_a_trip_point_slows_work_started_after_the_crossing(tmp_path: Any) -> None:
    # 1 W while the core works, R = 10 °C/W, C = 0.1 J/°C (τ = 1 s), trip at 25 + 10·(1 − e^−1):
    # the core crosses it at exactly 1 s into a 2 s image; that image keeps its end (2 s), the
    # next one, started at 2 s at level 1 (scale 2), takes 4 s
    trip = 25 + 10 * (1 - math.exp(-1.0))
    prof = device(2.0, thermal={"r_c_per_w": 10.0, "c_j_per_c": 0.1,
                                "trips": [{"temp_c": trip, "hysteresis_c": 100.0}]},
                  dvfs=[{"scale": 1.0}, {"scale": 2.0}])
    prof["llm"] = {"kv_capacity_tokens": 100_000, "step": {**STEP, "base_s": 0.0, "per": {}}}
    sc = replay(tmp_path, [(0.0, 1), (0.01, 1)], prof, text_tokens=99)
    model = Model(sc)
    levels: list[tuple[float, int]] = []

    def watch() -> Any:
        heat = model.devices[0].heat
        while True:
            yield model.env.timeout(0.25)
            levels.append((model.env.now, heat.level))

    model.env.process(watch())
    records = model.run()  # (the watcher does not keep it going past the last request)
    assert stamps(records, "preproc_start_s", "preproc_end_s", "finished_s") == [
        ("d-1", 0.0, 2.0, 2.0), ("d-2", 2.0, 6.0, 6.0)]
    assert [lv for t, lv in levels if t in (0.75, 1.25)] == [0, 1]
    assert model.env.now == 6.0 and levels[-1][0] == 6.0
    assert_same_timelines(sc)


def test_every_step_of_the_fast_engine_costs_step_cost_s_of_what_it_holds() -> None:
    # a busy one-core device whose encoder runs in the worker (no encoder tokens in the steps),
    # every step coefficient set, nominal clock, no noise: the fast engine's step durations are
    # exactly the specification's function of the counts it reports
    per = {"prefill_tokens": 0.001, "decode_tokens": 0.01, "context_tokens": 3e-6,
           "prefill_x_context": 1e-9}
    prof = device(0.01, llm={"kv_capacity_tokens": 100_000,
                             "step": {**STEP, "per": per, "max_num_batched_tokens": 300}})
    prof["stages"]["encode"] = {"unit": "cpu"}
    sc = scenario_from_raw({"name": "steps", "requests": 40, "sample_interval_s": 1e9,
                            "devices": [{"name": "d", "profile": prof, "workload": {
                                "rate_hz": 8.0, "output_tokens": [2, 30],
                                "image": {"sizes": [{"width": 448, "height": 448}]}}}]})
    sim = Simulation(sc)
    engine = sim.devices[0].engine
    assert isinstance(engine, StepEngine)
    m = sc.devices[0].profile.llm.step
    assert m is not None
    seen: list[Step] = []
    engine.on_step = seen.append
    sim.run()
    assert len(seen) > 50 and any(s.prefill_tokens and s.decode_tokens for s in seen)
    assert [s.duration_s for s in seen] == [
        step_cost_s(m, s.prefill_tokens, s.decode_tokens, s.context_tokens, 0, 0) for s in seen]


@pytest.mark.parametrize(("field", "value"), [
    ("policy", {"kind": "always_cloud"}),
    ("admission", {"max_pending": 4}),
    ("host", {"cores": 2, "engine_threads": 2}),
    ("battery", {"capacity_wh": 10.0}),
    ("thermal.governor", {"r_c_per_w": 1.0, "c_j_per_c": 1.0, "governor": "power_allocator"}),
    ("llm.step.cold_shape_factor", {**STEP, "cold_shape_factor": 0.1}),
    ("llm.step.drift_sd", {**STEP, "drift_sd": 0.05, "drift_tau_s": 5.0}),
    ("llm_variants", {"small": {"unit": "cpu", "prefill": {}, "decode_step": {}}}),
])
def test_what_the_specification_does_not_model_is_refused_by_name(
        tmp_path: Any, field: str, value: Any) -> None:
    prof = device(0.1)
    raw: dict[str, Any] = {"name": "x", "requests": 1,
                           "devices": [{"name": "d", "profile": prof}]}
    if field == "policy":
        raw["policy"] = value
    elif field.startswith("llm.step."):
        prof["llm"]["step"] = value
    else:
        prof[field.split(".")[0]] = value
    with pytest.raises(ConfigError, match=re.escape(f"{field}: ")):
        Model(scenario_from_raw(raw))


def test_a_profile_without_a_step_model_is_refused() -> None:
    raw = {"name": "x", "requests": 1, "devices": [{"name": "d", "profile": one_core_profile()}]}
    with pytest.raises(ConfigError, match=r"llm\.step: is required"):
        Model(scenario_from_raw(raw))
