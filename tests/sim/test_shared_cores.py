"""Shared cores (``host:``): preprocessing workers and the engine's threads slow each other down.

The device is a CPU-only server: one preprocessing worker whose job (image decode) takes 1 s
alone, and a step engine whose every step takes 0.5 s alone. With ``host: {cores: 2,
engine_threads: 2}`` a job started while the engine steps wants the cores with the engine's two
threads (demand 3 on 2 cores: ×1.5), and a step started while the worker is busy is stretched by
the same (2 + 1) / 2. Timelines are ``(request, preprocessing start, its end, first token, last
token)``; steps are ``(start, duration)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from edgeserve.records import Outcome, RequestRecord
from sim.core.device import Device
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.step_engine import Step
from sim.scenario.config import LinkConfig, load_scenario
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import ConfigError, build

ZERO: dict[str, Any] = {"kind": "deterministic", "base_s": 0.0}


def server_profile(workers: int = 1, decode_s: float = 1.0, step_s: float = 0.5,
                   **extra: Any) -> dict[str, Any]:
    """A CPU-only server: ``workers`` preprocessing workers, a step engine of fixed step time."""
    prof: dict[str, Any] = {
        "name": "server",
        "units": {"workers": {"kind": "cpu", "count": workers},
                  "engine": {"kind": "cpu", "count": 1}},
        "stages": {
            "image_decode": {"unit": "workers",
                             "model": {"kind": "deterministic", "base_s": decode_s}},
            "resize": {"unit": "workers", "model": ZERO},
            "normalize": {"unit": "workers", "model": ZERO},
            "prefill": {"unit": "engine"},
            "decode_step": {"unit": "engine"},
        },
        "thermal": {"r_c_per_w": 1.0, "c_j_per_c": 1.0},
        "llm": {"step": {"base_s": step_s, "per": {}}},
    }
    prof.update(extra)
    return prof


class Server:
    """One device fed requests at given times; records and engine steps are logged."""

    def __init__(self, profile: dict[str, Any]) -> None:
        self.loop = EventLoop()
        self.records: list[RequestRecord] = []
        self.steps: list[tuple[float, float]] = []
        self.device = Device(self.loop, "d", build(DeviceProfile, profile, "profile server"),
                             LinkConfig(), None, "0", lambda j: self.records.append(j.rec))
        self.device.engine.on_step = self._on_step  # type: ignore[attr-defined]

    def _on_step(self, s: Step) -> None:
        self.steps.append((s.start_s, s.duration_s))

    def send(self, name: str, t: float, output_tokens: int, prompt_tokens: int = 100) -> None:
        rec = RequestRecord(id=name, arrived_s=t, num_images=1, prompt_tokens=prompt_tokens,
                            output_tokens=output_tokens)
        job = Job(rec, self.device, 640 * 480, 448 * 336, 0, prompt_tokens, output_tokens)
        self.loop.at(t, self.device.admit, job)

    def run(self) -> list[tuple[Any, ...]]:
        self.loop.run_until(1000.0)
        return [(r.id, r.preproc_start_s, r.normalize_end_s, r.first_token_s, r.last_token_s)
                for r in sorted(self.records, key=lambda r: r.id)
                if r.outcome is Outcome.OK]


def test_a_preprocessing_job_during_a_step_and_the_steps_during_it_are_stretched_by_one_and_a_half() -> None:
    # a: preprocessed alone (0–1), its prefill step 1–1.5 (no worker busy), then 3 decode steps.
    # b arrives at 1.25, mid-step: worker + 2 engine threads on 2 cores → 1.5 s (1.25–2.75).
    # The two steps starting while b is preprocessed (1.5, 2.25) take 0.75 s; the one at 3.0,
    # after b's job ended, 0.5 s again: it holds a's last token and b's prefill.
    s = Server(server_profile(host={"cores": 2, "engine_threads": 2}))
    s.send("a", 0.0, output_tokens=4)
    s.send("b", 1.25, output_tokens=2)
    assert s.run() == [("a", 0.0, 1.0, 1.5, 3.5), ("b", 1.25, 2.75, 3.5, 4.0)]
    assert s.steps == [(1.0, 0.5), (1.5, 0.75), (2.25, 0.75), (3.0, 0.5), (3.5, 0.5)]


def test_with_enough_cores_nothing_is_stretched() -> None:
    # 4 cores hold the worker and the engine's 2 threads: the same requests as above at their
    # nominal times; b's job (1.25–2.25) reaches the engine during a's third step
    s = Server(server_profile(host={"cores": 4, "engine_threads": 2}))
    s.send("a", 0.0, output_tokens=4)
    s.send("b", 1.25, output_tokens=2)
    assert s.run() == [("a", 0.0, 1.0, 1.5, 3.0), ("b", 1.25, 2.25, 3.0, 3.5)]
    assert s.steps == [(1.0, 0.5), (1.5, 0.5), (2.0, 0.5), (2.5, 0.5), (3.0, 0.5)]


def test_without_a_host_section_the_cores_are_separate_machines() -> None:
    s = Server(server_profile())
    s.send("a", 0.0, output_tokens=4)
    s.send("b", 1.25, output_tokens=2)
    assert s.run() == [("a", 0.0, 1.0, 1.5, 3.0), ("b", 1.25, 2.25, 3.0, 3.5)]


def test_workers_alone_share_the_cores_too() -> None:
    # two workers on one core, the engine idle (a 2 s hand-off keeps a's prefill until 3.0): the
    # first job starts alone (1 s), the second, started while the first runs, counts both (×2:
    # 0.25–2.25); it is not re-priced when the first ends at 1.0 — the busy workers are counted
    # at the start of the service
    prof = server_profile(workers=2, host={"cores": 1, "engine_threads": 1})
    prof["llm"]["handoff_s"] = 2.0
    s = Server(prof)
    s.send("a", 0.0, output_tokens=1)
    s.send("b", 0.25, output_tokens=1)
    assert [r[:3] for r in s.run()] == [("a", 0.0, 1.0), ("b", 0.25, 2.25)]


def one_core_a_then_b(host: dict[str, Any]) -> tuple[Server, dict[str, tuple[Any, ...]]]:
    """Steps of 0.1 s on ``host``; a (two tokens) at 0, b (one token) at 1.05, mid a's prefill."""
    s = Server(server_profile(step_s=0.1, host=host))
    s.send("a", 0.0, output_tokens=2)
    s.send("b", 1.05, output_tokens=1)
    return s, {r[0]: r for r in s.run()}


def test_on_one_core_a_job_is_slowed_only_while_steps_run_beside_it() -> None:
    # one core for the worker and the engine's thread; steps of 0.1 s. a: alone 0–1, its prefill
    # step 1.0–1.1, its decode step (b's job beside it: the core's share, ×2) 1.1–1.3, done.
    # b starts at 1.05, mid-step: ×2 for the step's 0.05 s left and the next step's 0.2 s —
    # 0.125 s of its work — then alone at full speed: 0.875 s more, to 2.175. (Priced at its
    # start for the whole job, it would have run 2 s, to 3.05.)
    s, recs = one_core_a_then_b({"cores": 1, "engine_threads": 1})
    assert recs["a"] == ("a", 0.0, 1.0, pytest.approx(1.1), pytest.approx(1.3))
    assert recs["b"][1:] == (1.05, pytest.approx(2.175), pytest.approx(2.275),
                             pytest.approx(2.275))
    assert s.steps == pytest.approx([(1.0, 0.1), (1.1, 0.2), (2.175, 0.1)])


def test_a_measured_in_step_demand_slows_a_job_beside_steps_more_than_an_even_share() -> None:
    # as above, with engine_demand_threads 3: inside steps b runs at a quarter of its speed,
    # 0.05 / 4 + 0.2 / 4 = 0.0625 s of its work, then 0.9375 s alone, to 2.2375. The steps
    # themselves keep the even share (a's decode step 0.2 s).
    _, recs = one_core_a_then_b({"cores": 1, "engine_threads": 1, "engine_demand_threads": 3.0})
    assert recs["a"] == ("a", 0.0, 1.0, pytest.approx(1.1), pytest.approx(1.3))
    assert recs["b"][1:] == (1.05, pytest.approx(2.2375), pytest.approx(2.3375),
                             pytest.approx(2.3375))


def test_a_clock_level_and_shared_cores_compose() -> None:
    # DVFS level 1 (scale 2) on top of the ×1.5 of sharing: b's job takes 1 × 2 × 1.5 = 3 s
    s = Server(server_profile(host={"cores": 2, "engine_threads": 2},
                              dvfs=[{"scale": 1.0}, {"scale": 2.0}]))
    s.device.set_level(1)
    s.send("a", 0.0, output_tokens=8)
    s.send("b", 2.5, output_tokens=1)
    recs = s.run()
    assert recs[0][:4] == ("a", 0.0, 2.0, 3.0)  # alone: 2 s; prefill step 2–3 (1 s at scale 2)
    assert recs[1][:3] == ("b", 2.5, 5.5)
    assert s.steps[:3] == [(2.0, 1.0), (3.0, 1.5), (4.5, 1.5)]


@pytest.mark.parametrize(("key", "value", "message"), [
    ("devices[0].profile.host", {"cores": 0, "engine_threads": 2},
     "scenario.devices[0].profile.host.cores: must be > 0, got 0"),
    ("devices[0].profile.host", {"cores": 2, "engine_threads": -1},
     "scenario.devices[0].profile.host.engine_threads: must be > 0, got -1"),
    ("devices[0].profile.host", {"cores": 2},
     "scenario.devices[0].profile.host.engine_threads: required field is missing"),
    ("devices[0].profile.host", {"cores": 2, "engine_threads": 2, "threads": 1},
     "scenario.devices[0].profile.host.threads: unknown field"),
    ("devices[0].profile.host", {"cores": 2, "engine_threads": 2, "engine_demand_threads": -0.5},
     "scenario.devices[0].profile.host.engine_demand_threads: must be >= 0, got -0.5"),
    ("devices[0].profile.host", {"cores": 2.5, "engine_threads": 2},
     "scenario.devices[0].profile.host.cores: expected an integer, got 2.5"),
    # the Jetson profile has no llm.step: its BatchEngine does not model shared cores
    ("devices[0].profile.host", {"cores": 2, "engine_threads": 2},
     "scenario.devices[0].profile.host: shared cores are modelled for the vLLM V1 step engine "
     "only"),
])
def test_bad_host_fields_are_named(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [(key, value)])
    assert str(e.value).startswith(message)


def test_a_host_section_loads_onto_a_step_engine_profile() -> None:
    prof = build(DeviceProfile, server_profile(host={"cores": 2, "engine_threads": 2}),
                 "profile server")
    assert prof.host is not None and (prof.host.cores, prof.host.engine_threads) == (2, 2)


def test_measured_contention_lengthens_a_step_by_kappa_per_second_of_worker_activity() -> None:
    # 4 cores would leave every step at 0.5 s, but the trace measured 1.2 s more step time per
    # second of worker activity (κ = 1.2). b's job (1.25–2.25) starts during a's prefill step
    # (1.0–1.5): 0.25 s of overlap extend it by 0.3 s, to 1.8. The next step would overlap the
    # job's last 0.45 s: 0.5 + 1.2 × 0.45 = 1.04 s, to 2.84. The worker is idle after that.
    s = Server(server_profile(host={"cores": 4, "engine_threads": 1,
                                    "step_extra_s_per_worker_s": 1.2}))
    s.send("a", 0.0, output_tokens=4)
    s.send("b", 1.25, output_tokens=2)
    assert s.run() == [("a", 0.0, 1.0, pytest.approx(1.8), pytest.approx(3.84)),
                       ("b", 1.25, 2.25, pytest.approx(3.34), pytest.approx(3.84))]
    # step records are written when a step starts: the first shows its length before b came
    assert s.steps == pytest.approx([(1.0, 0.5), (1.8, 1.04), (2.84, 0.5), (3.34, 0.5)])


def test_the_hand_off_delays_the_engine_not_the_worker() -> None:
    # llm.handoff_s = 0.25: a's job ends at 1.0, the engine holds it at 1.25
    prof = server_profile()
    prof["llm"]["handoff_s"] = 0.25
    s = Server(prof)
    s.send("a", 0.0, output_tokens=2)
    s.send("b", 1.0, output_tokens=1)
    assert s.run() == [("a", 0.0, 1.0, 1.75, 2.25), ("b", 1.0, 2.0, 2.75, 2.75)]
    assert s.steps[0] == (1.25, 0.5)


def test_vllm_input_processing_holds_a_queued_request_back_from_the_scheduler() -> None:
    # input processing 0.1 s + 1 µs per target pixel (448 × 336: 0.150528 s): a is handed over
    # at 1.0 (engine_queued_s, as the runtime stamps it) and scheduled at 1.250528
    prof = server_profile()
    prof["llm"]["input_processing"] = {"kind": "deterministic", "base_s": 0.1,
                                       "per": {"target_pixels": 1e-6}}
    s = Server(prof)
    s.send("a", 0.0, output_tokens=1)
    assert s.run() == [("a", 0.0, 1.0, pytest.approx(1.750528), pytest.approx(1.750528))]
    assert s.records[0].engine_queued_s == pytest.approx(1.0)
    assert s.steps == pytest.approx([(1.250528, 0.5)])


def test_a_worker_beyond_the_cores_the_engine_leaves_costs_the_step_kappa_over() -> None:
    # 2 cores, the engine on 1: one busy worker runs beside a step on the free core (κ = 0.1
    # per second of it), a second takes a core from the engine (κ₊ = 1.0 per second).
    # a: alone 0–1, its prefill step 1.0–1.5. b at 1.1: one worker busy, the engine stepping
    # (demand 2 on 2 cores: not stretched, 1.1–2.1); it extends the running step by
    # 0.1 × 0.4 s left = 0.04. c at 1.2: two workers and the engine (×1.5: 1.2–2.7), beyond the
    # free core: + 1.0 × 0.34 s left, so the step ends at 1.88. The next step (a's first
    # decode) overlaps c for its whole 0.5 s (inside, κ) and b for 0.22 s (beyond, κ₊):
    # 0.5 + 0.1 × 0.5 + 1.0 × 0.22 = 0.77 s — more than the cores' share, 0.5 × 3/2.
    s = Server(server_profile(workers=2, host={
        "cores": 2, "engine_threads": 1, "step_extra_s_per_worker_s": 0.1,
        "step_extra_s_per_oversubscribed_worker_s": 1.0}))
    s.send("a", 0.0, output_tokens=4)
    s.send("b", 1.1, output_tokens=1)
    s.send("c", 1.2, output_tokens=1)
    recs = {r[0]: r for r in s.run()}
    assert recs["b"][1:3] == (1.1, pytest.approx(2.1))
    assert recs["c"][1:3] == (1.2, pytest.approx(2.7))
    assert [x for step in s.steps[:2] for x in step] == pytest.approx([1.0, 0.5, 1.88, 0.77])


def test_without_kappa_over_every_worker_costs_kappa() -> None:
    prof = build(DeviceProfile, server_profile(host={
        "cores": 2, "engine_threads": 1, "step_extra_s_per_worker_s": 0.3}), "profile server")
    assert prof.host is not None
    assert prof.host.kappa_over == 0.3 and prof.host.free_cores == 1
