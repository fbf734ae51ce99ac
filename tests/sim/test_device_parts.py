"""The device's parts, each alone: the CPU pool, the encoder unit, admission, unit power, one-node heat.

Exact timelines with deterministic stage times: decode 1 s, resize 2 s, normalize 3 s per
request (6 s on a core), encode 4 s, unless a test says otherwise. Nothing but an event loop
joins the parts here; :mod:`sim.core.device` wires them for a simulation.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from edgeserve.records import Outcome, RequestRecord
from sim.core.admission import Admission
from sim.core.cpu_pool import CpuPool
from sim.core.encoder_unit import EncoderUnit
from sim.core.heat import NodeHeat
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.service import Draws, ServiceTime
from sim.core.step_engine import StepEngine
from sim.core.unit_power import UnitPower
from sim.scenario.profiles import (
    AdmissionConfig,
    DeviceProfile,
    HostConfig,
    ServiceModelConfig,
    StepTimeModel,
)
from sim.scenario.schema import build
from tests.sim.conftest import one_core_profile


def const(s: float) -> ServiceTime:
    return ServiceTime(ServiceModelConfig(base_s=s), Draws("parts"))


def job(name: str, images: int = 1) -> Job:
    return Job(RequestRecord(id=name, arrived_s=0.0, num_images=images), None, 0, 0, 100, 10, 4, 0)


class Busy:
    """Records ``on_busy(unit, ±1)`` calls as (time, unit, running count)."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self.count: dict[int, int] = {}
        self.log: list[tuple[float, int, int]] = []

    def __call__(self, unit: int, delta: int) -> None:
        self.count[unit] = self.count.get(unit, 0) + delta
        self.log.append((self.loop.now, unit, self.count[unit]))


def pool(loop: EventLoop, cores: int, busy: Busy, done: list[tuple[float, str]],
         host: HostConfig | None = None, encode: ServiceTime | None = None) -> CpuPool:
    return CpuPool(loop, cores, 0, const(1.0), const(2.0), const(3.0), encode, host, busy,
                   lambda j: done.append((loop.now, j.rec.id)))


# ---- CPU pool -------------------------------------------------------------------------------
def test_the_pool_runs_as_many_jobs_as_cores_and_queues_the_rest_in_order() -> None:
    loop = EventLoop()
    busy = Busy(loop)
    done: list[tuple[float, str]] = []
    p = pool(loop, 2, busy, done)
    jobs = [job(n) for n in "abc"]
    for j in jobs:
        p.submit(j)
    assert (p.busy, len(p.queue)) == (2, 1)
    loop.run_until(1000.0)
    assert done == [(6.0, "a"), (6.0, "b"), (12.0, "c")]
    a, _, c = (j.rec for j in jobs)
    assert (a.preproc_start_s, a.decode_end_s, a.resize_end_s, a.normalize_end_s) == (0, 1, 3, 6)
    assert c.preproc_start_s == 6.0 and c.worker == a.worker  # c took the first core freed
    # power: two cores busy at 0, one stays busy through the hand-over to c, idle at 12
    assert busy.log == [(0.0, 0, 1), (0.0, 0, 2), (6.0, 0, 1), (12.0, 0, 0)]


def test_a_slower_clock_stretches_the_jobs_started_after_it() -> None:
    loop = EventLoop()
    done: list[tuple[float, str]] = []
    p = pool(loop, 1, Busy(loop), done)
    p.submit(job("a"))
    p.scale = 2.0  # throttled after a started: a keeps its end, b takes twice as long
    p.submit(job("b"))
    loop.run_until(1000.0)
    assert done == [(6.0, "a"), (18.0, "b")]
    assert p.mean_s == pytest.approx(0.05 * 6 + 0.95 * 0.05 * 6)  # the mean is at nominal clock


def test_an_encoder_in_the_worker_keeps_the_core_through_it() -> None:
    loop = EventLoop()
    done: list[tuple[float, str]] = []
    p = pool(loop, 1, Busy(loop), done, encode=const(4.0))
    j = job("a")
    p.submit(j)
    loop.run_until(1000.0)
    assert done == [(10.0, "a")] and j.rec.encode_end_s == 10.0


def test_shared_cores_stretch_a_job_by_the_demand_on_them() -> None:
    loop = EventLoop()
    done: list[tuple[float, str]] = []
    p = pool(loop, 3, Busy(loop), done, host=HostConfig(cores=2, engine_threads=1))
    for n in "abc":  # demand 1, 2 then 3 workers on 2 cores: the third runs 1.5× longer
        p.submit(job(n))
    loop.run_until(1000.0)
    assert done == [(6.0, "a"), (6.0, "b"), (9.0, "c")]


def test_an_engine_step_beside_busy_workers_takes_the_larger_of_share_and_measured_slowdown() -> None:
    loop = EventLoop()
    p = pool(loop, 2, Busy(loop), [], host=HostConfig(cores=2, engine_threads=2,
                                                      step_extra_s_per_worker_s=0.5))
    p.submit(job("a"))  # busy until 6 s
    # the cores' share: (2 threads + 1 worker) / 2 cores → 1.5 × 4 s = 6 s;
    # measured: 4 s + 0.5 × 4 s of overlap = 6 s; both 6 s
    assert p.step_stretch(4.0) == pytest.approx(6.0)
    assert p.step_stretch(10.0) == pytest.approx(max(15.0, 10.0 + 0.5 * 6.0))


def test_a_job_started_during_a_step_lengthens_it_by_kappa_per_second_of_overlap() -> None:
    loop = EventLoop()
    engine = StepEngine(loop, "e", StepTimeModel(base_s=4.0, per={}, max_num_batched_tokens=1000,
                                                 max_num_seqs=4, block_size_tokens=100),
                        100_000, lambda j: None)
    p = pool(loop, 1, Busy(loop), [], host=HostConfig(cores=8, engine_threads=1,
                                                      step_extra_s_per_worker_s=0.5))
    p.share_with(engine)
    assert engine.stretch is not None
    engine.submit(Job(RequestRecord(id="t", arrived_s=0.0), None, 0, 0, 0, 10, 1, 0))
    loop.run_until(1.0)
    assert engine.stepping and engine.step_end_s == pytest.approx(4.0)
    p.submit(job("a"))  # busy 1 → 7 s; 3 s of the step left → +1.5 s
    assert engine.step_end_s == pytest.approx(5.5)


def test_on_one_core_a_step_started_during_a_job_puts_its_end_back() -> None:
    # one core, one engine thread; decode 1 + resize 2 + normalize 3 + encode 4 = 10 s of work.
    # A text request's step runs 0–4. The job starts at 1: ×2 beside the step (3 s, 1.5 s of
    # work), then alone, first due at 12.5. A second text request at 6 starts a step that the
    # job shares (its cores' share: 8 s, 6–14), so the job has 3.25 s of work left at 12.5: 0.75
    # of it beside the step's last 1.5 s, the rest alone, done at 16.5. Its stage ends move in
    # proportion, the encoder's to the end.
    loop = EventLoop()
    engine = StepEngine(loop, "e", StepTimeModel(base_s=4.0, per={}, max_num_batched_tokens=1000,
                                                 max_num_seqs=4, block_size_tokens=100),
                        100_000, lambda j: None)
    done: list[tuple[float, str]] = []
    p = pool(loop, 1, Busy(loop), done, host=HostConfig(cores=1, engine_threads=1),
             encode=const(4.0))
    p.share_with(engine)
    text = [Job(RequestRecord(id=f"t{i}", arrived_s=0.0), None, 0, 0, 0, 10, 1, 0) for i in (1, 2)]
    engine.submit(text[0])
    a = job("a")
    loop.at(1.0, lambda _: p.submit(a))
    loop.at(6.0, lambda _: engine.submit(text[1]))
    loop.run_until(100.0)
    assert done == [(pytest.approx(16.5), "a")]
    f = 15.5 / 11.5  # the job took 15.5 s where 11.5 were first scheduled
    rec = a.rec
    assert (rec.decode_end_s, rec.normalize_end_s, rec.encode_end_s) == pytest.approx(
        (1.0 + 2.0 * f, 1.0 + 7.5 * f, 16.5))


# ---- encoder unit ---------------------------------------------------------------------------
def test_the_encoder_unit_serves_its_queue_in_order_and_stamps_the_records() -> None:
    loop = EventLoop()
    busy = Busy(loop)
    done: list[tuple[float, str]] = []
    enc = EncoderUnit(loop, 1, 3, const(4.0), busy, lambda j: done.append((loop.now, j.rec.id)))
    jobs = [job("a"), job("b")]
    for j in jobs:
        enc.submit(j)
    assert (enc.busy, len(enc.queue)) == (1, 1)
    enc.scale = 0.5  # b starts at a faster clock
    loop.run_until(1000.0)
    assert done == [(4.0, "a"), (6.0, "b")]
    assert [(j.rec.encode_end_s, j.rec.preproc_end_s) for j in jobs] == [(4.0, 4.0), (6.0, 6.0)]
    assert busy.log == [(0.0, 3, 1), (6.0, 3, 0)]


# ---- admission ------------------------------------------------------------------------------
def test_admission_queues_for_a_slot_then_rejects_beyond_max_pending() -> None:
    loop = EventLoop()
    finished: list[Job] = []
    p = pool(loop, 1, Busy(loop), [])
    adm = Admission(loop, AdmissionConfig(max_pending=1, max_inflight=10, max_engine_queue=1), 8,
                    p, finished.append)
    a, b, c = job("a"), job("b", images=0), job("c", images=0)
    for j in (a, b, c):
        adm.admit(j)
    assert (adm.slots_held, len(adm.slot_queue), adm.admitted) == (1, 1, 2)
    assert c.rec.outcome is Outcome.REJECTED and c.rec.error is not None
    assert c.rec.error.startswith("429 server is at capacity: max_pending 1 requests wait for one "
                                  "of 1 engine slots")
    adm.first_token(a)  # a's slot passes straight to b, which starts preprocessing
    assert (adm.slots_held, len(adm.slot_queue), p.busy, len(p.queue)) == (1, 0, 1, 1)
    b.rec.first_token_s = None
    adm.done(b)  # b fails before its first token: its slot is free again
    assert (adm.slots_held, adm.admitted, finished) == (0, 1, [c, b])


def test_admission_rejects_an_image_request_when_max_pending_wait_for_a_worker() -> None:
    loop = EventLoop()
    p = pool(loop, 1, Busy(loop), [])
    adm = Admission(loop, AdmissionConfig(max_pending=1, max_inflight=10), 8, p, lambda j: None)
    assert adm.slots == 16  # twice max_num_seqs by default
    jobs = [job(n) for n in "abc"]
    for j in jobs:
        adm.admit(j)
    err = jobs[2].rec.error
    assert err is not None and "1 requests wait for a preprocessing worker" in err


# ---- unit power and one-node heat -----------------------------------------------------------
def profile(**extra: Any) -> DeviceProfile:
    raw = one_core_profile(**extra)
    raw["units"]["cpu"].update(count=2, active_w=3.0, idle_w=1.0)
    raw["base_w"] = 2.0
    return build(DeviceProfile, raw, "profile")


def test_unit_power_counts_busy_servers_up_to_the_units_count() -> None:
    up = UnitPower(profile())
    cpu = up.index("cpu")
    assert up.static_w == pytest.approx(2.0 + 1.0 * up.cap[cpu])
    assert up.delta(cpu, 1) and up.dyn_busy_w == pytest.approx(2.0)
    for _ in range(up.cap[cpu]):  # asked beyond its count: the unit is already fully busy
        up.delta(cpu, 1)
    assert not up.delta(cpu, 1)
    assert up.busy_w(cpu) == pytest.approx(2.0 * up.cap[cpu])


def test_one_node_heat_integrates_energy_and_temperature_exactly() -> None:
    prof = profile(thermal={"r_c_per_w": 2.0, "c_j_per_c": 5.0, "ambient_c": 25.0, "trips": []})
    loop = EventLoop()
    up = UnitPower(prof)
    levels: list[int] = []
    heat = NodeHeat(loop, up, prof, levels.append)
    heat.start()
    assert levels == [0]  # the governor's first look, at full clock
    cpu = up.index("cpu")
    up.delta(cpu, 1)
    heat.power_changed()  # from now: static + 2 W
    p = up.static_w + 2.0
    loop.run_until(10.0)
    heat.integrate(10.0)
    assert heat.energy_j == pytest.approx(10.0 * p)
    ss = 25.0 + p * 2.0
    assert heat.junction_c() == pytest.approx(ss + (25.0 - ss) * math.exp(-10.0 / 10.0))
    assert heat.throttled_s == 0.0
