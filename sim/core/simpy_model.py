"""The local device pipeline as plain SimPy: the specification the fast engine is tested against.

Picture a camera box with two CPU cores, a small NPU and an accelerator that runs the language
model. Photos arrive; each needs a core for a while (decode the JPEG, resize it, normalize it),
then the NPU (encode the image into tokens), then a seat in the language model's batch::

    photos ─▶ [ CPU pool: 2 cores ] ─▶ [ NPU: 1 encoder ] ─▶ engine queue ─▶ [ LLM engine ]
              decode→resize→normalize     encode                          steps of a batch

In SimPy the cores and the NPU are :class:`simpy.Resource` s, like the pumps of a gas station: a
request asks for one (``yield cpu.request()``), waits in line if all are taken, holds it while it
works (``yield env.timeout(seconds)``) and gives it back. Every request is one process,
:meth:`Device.request`, that walks the line from arrival to its last token and writes the
timestamps of its :class:`~edgeserve.records.RequestRecord` on the way.

The LLM engine is one process, :meth:`Engine.run`, that works in *steps* as vLLM V1 does. Before
each step it fills a budget of ``max_num_batched_tokens`` tokens: one decode token for every
request past its prompt, then the next chunk of each prompt still being computed, then new
requests from the queue (first come first served) while budget is left, fewer than
``max_num_seqs`` run and the KV cache — a :class:`simpy.Container` of tokens — has whole blocks
for the request's prompt and answer. A step lasts :func:`step_cost_s` of what it holds; at its end
each decoder has one more token and each request whose prompt it completed has its first.

The box heats up. :class:`Heat` is a lumped RC node (``C·dT/dt = P − (T − T_amb)/R``) fed by the
power of the busy units; its governor is a process that sleeps until the temperature crosses the
next trip point under the present power (or until the power changes, which moves that moment)
and then throttles the clock one level, or releases a level once the node cools below the trip
minus its hysteresis. Work *started* at a throttled level takes ``scale`` times as long.

Run a scenario with :class:`Model`::

    records = Model(load_scenario("my.yaml")).run()      # every request's RequestRecord

To extend the model, copy a process: a second engine, a radio, a battery are a few lines each.
The simulator proper (:class:`sim.core.simulation.Simulation`) runs the same model on a callback
engine many times faster; ``tests/sim/test_simpy_model.py`` checks that both give every request
the same timeline for the same seed. This specification covers the local pipeline only; a
scenario asking for more (offloading policies, ``admission:``, ``host:``, a battery, the power
allocator, ``llm_variants``, a profile without ``llm.step``, step drift or cold shapes) is refused
with a :class:`~sim.scenario.schema.ConfigError` naming what it asked for.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy
from simpy.resources.resource import Release, Request

from edgeserve.records import Outcome, RequestRecord
from sim.core.fleet import instances
from sim.core.job import Job
from sim.core.service import Draws, Linear, ServiceTime
from sim.core.step_cost import StepCost
from sim.core.thermal import StepWiseGovernor, ThermalNode
from sim.core.workload import Arrival, ImageGeometry, arrivals
from sim.scenario.config import Scenario
from sim.scenario.profiles import (
    CPU_STAGE_NAMES,
    DeviceProfile,
    GovernorKind,
    ServiceKind,
    ServiceModelConfig,
    StageName,
    StepTimeModel,
)
from sim.scenario.schema import ConfigError

SimTime = float
Process = Generator[simpy.Event, Any, None]

#: the governor counts a trip as crossed within this much of it (the float error of a crossing
#: computed in closed form)
TRIP_EPS_C = 1e-6


def step_cost_s(m: StepTimeModel, prefill: int, decode: int, context: int, encoder: int,
                encoder_sq: int) -> float:
    """Seconds of one engine step at the nominal clock (the step model of :mod:`sim.core.step_engine`).

    ``prefill``: prompt tokens computed; ``decode``: requests decoding one token; ``context``: KV
    tokens the step's requests hold at its end; ``encoder``: image tokens encoded in the step
    (their sum of squares ``encoder_sq``).
    """
    return StepCost(m.base_s, m.per).seconds(prefill, decode, context, encoder, encoder_sq)


def check_supported(scenario: Scenario) -> None:
    """Raise :class:`ConfigError` if ``scenario`` asks for something this specification does not
    model (see the module docstring)."""
    if scenario.policy.kind != "always_local":
        _refuse("policy", f"{scenario.policy.kind!r} is not modelled (only always_local: no "
                          f"offloading)")
    for i, entry in enumerate(scenario.devices):
        p = entry.profile
        where = f"devices[{i}].profile"
        step = p.llm.step
        for asked, field in ((step is None, "llm.step"),
                             (p.host is not None, "host"),
                             (p.admission is not None, "admission"),
                             (p.battery is not None, "battery"),
                             (bool(p.llm_variants), "llm_variants"),
                             (p.thermal.governor is not GovernorKind.STEP_WISE,
                              "thermal.governor"),
                             (step is not None and step.drift_sd > 0, "llm.step.drift_sd"),
                             (step is not None and step.cold_shape_factor > 0,
                              "llm.step.cold_shape_factor"),
                             (step is not None and step.per.get("image_arrivals", 0.0) > 0,
                              "llm.step.per.image_arrivals")):
            if asked:
                need = "is required" if field == "llm.step" else "is not modelled"
                _refuse(f"{where}.{field}", f"{need} (profile {p.name!r})")


def _refuse(field: str, why: str) -> None:
    raise ConfigError(f"{field}: {why} in the SimPy specification (sim.core.simpy_model), which models "
                      f"the local pipeline only: CPU pool, encoder unit, step engine and step-wise "
                      f"DVFS. Run this scenario with sim.core.simulation.Simulation instead.")


class Heat:
    """Power, temperature and clock level of one device.

    Power is piecewise constant: ``base_w`` and every unit's idle power, plus ``active_w − idle_w``
    for each busy server (at most a unit's ``count``) times the clock level's ``power_scale``.
    The node is integrated exactly whenever the power changes; the governor process wakes at the
    next trip crossing, computed in closed form under the present power.
    """

    def __init__(self, env: simpy.Environment, profile: DeviceProfile) -> None:
        self.env = env
        self.units = profile.units
        self.levels = profile.dvfs
        self.static_w = profile.base_w + sum(u.idle_w * u.count for u in profile.units.values())
        self.busy_servers = dict.fromkeys(profile.units, 0)
        self.node = ThermalNode(profile.thermal, env.now)
        self.trips = StepWiseGovernor(profile.thermal, len(profile.dvfs))
        self.level = self.trips.update(self.node.temp_c)
        self.power_w = self._power()
        self._power_changed = env.event()
        env.process(self.governor())

    @property
    def scale(self) -> float:
        """How much longer work started now takes than at the nominal clock."""
        return self.levels[self.level].scale

    def _power(self) -> float:
        dynamic = sum((u.active_w - u.idle_w) * min(self.busy_servers[name], u.count)
                      for name, u in self.units.items())
        return self.static_w + dynamic * self.levels[self.level].power_scale

    def _set_power(self) -> None:
        self.node.advance(self.env.now, self.power_w)  # the old power up to now
        self.power_w = self._power()
        if not self._power_changed.triggered:
            self._power_changed.succeed()

    def busy(self, unit: str, delta: int) -> None:
        """A server of ``unit`` starts (+1) or stops (−1) working."""
        self.busy_servers[unit] += delta
        self._set_power()

    def _next_crossing_s(self) -> float:
        """Seconds until the node crosses the next trip (up) or release point (down)."""
        t = self.trips
        node = self.node
        ss = node.steady_c(self.power_w)
        a = t.active
        if a < t.n_trips and ss > t.trip_c[a]:
            return node.time_to(t.trip_c[a], self.power_w)
        if a > 0 and ss < t.release_c[a - 1]:
            return node.time_to(t.release_c[a - 1], self.power_w)
        return math.inf

    def governor(self) -> Process:
        """The step-wise governor: sleep until the next crossing or a power change."""
        env = self.env
        while True:
            self._power_changed = env.event()
            wait_s = self._next_crossing_s()
            crossing = env.timeout(wait_s) if wait_s < math.inf else None
            woke = yield (self._power_changed if crossing is None
                          else self._power_changed | crossing)
            if crossing is not None and crossing in woke:
                self.node.advance(env.now, self.power_w)
                level = self.trips.update(self.node.temp_c, TRIP_EPS_C)
                if level != self.level:
                    self.level = level
                    self._set_power()


@dataclass(slots=True)
class Sequence:
    """A request admitted to the engine: its prompt tokens in KV, its image, its answer so far."""

    job: Job
    kv_blocks_tokens: int  # KV it holds until it finishes (whole blocks)
    computed: int = 0  # prompt tokens in KV
    encoded: bool = True  # its image went through the encoder (always, when not in the step)
    tokens_out: int = 0

    @property
    def prefilled(self) -> bool:
        return self.computed >= self.job.prompt_tokens


class Engine:
    """The device's LLM engine: vLLM V1 steps under a token budget (see the module docstring)."""

    def __init__(self, env: simpy.Environment, name: str, model: StepTimeModel,
                 kv_capacity_tokens: int, encoder_in_step: bool, heat: Heat, unit: str,
                 draws: Draws, on_done: Any) -> None:
        self.env = env
        self.name = name
        self.model = model
        self.block = b = model.block_size_tokens
        self.kv_capacity_tokens = kv_capacity_tokens
        self.kv = simpy.Container(env, capacity=kv_capacity_tokens // b * b,
                                  init=kv_capacity_tokens // b * b)  # free KV tokens
        self.encoder_in_step = encoder_in_step
        self.heat = heat
        self.unit = unit
        self.noise = ServiceTime(ServiceModelConfig(kind=ServiceKind.LOGNORMAL, cv=model.cv), draws)
        self.on_done = on_done
        self.waiting: deque[Job] = deque()
        self.running: list[Sequence] = []  # in admission order
        self._work = env.event()
        env.process(self.run())

    def blocks_tokens(self, job: Job) -> int:
        b = self.block
        return (job.prompt_tokens + job.output_tokens + b - 1) // b * b

    def submit(self, job: Job) -> None:
        """A preprocessed request joins the queue (or fails: its sequence exceeds the cache)."""
        rec = job.rec
        rec.engine_queued_s = self.env.now
        need = self.blocks_tokens(job)
        if need > self.kv.capacity:
            rec.outcome = Outcome.FAILED
            rec.error = f"sequence of {job.prompt_tokens + job.output_tokens} tokens " \
                        f"({need // self.block} blocks of {self.block}) exceeds " \
                        f"the KV cache ({self.kv_capacity_tokens} tokens) of {self.name}"
            self.on_done(job)
            return
        self.waiting.append(job)
        if not self._work.triggered:  # an idle engine starts at the end of this instant
            self._work.succeed()

    def plan_step(self) -> tuple[list[Sequence], list[tuple[Sequence, int]], float]:
        """Fill the next step's token budget: its decoders, its prompt chunks and its time."""
        m = self.model
        budget = m.max_num_batched_tokens
        enc_budget = m.max_num_batched_tokens  # vLLM's max_num_encoder_input_tokens
        decoders = [s for s in self.running if s.prefilled]
        budget -= len(decoders)
        context = sum(s.computed + s.tokens_out for s in decoders)  # (their KV after the step)
        chunks: list[tuple[Sequence, int]] = []
        enc = enc_sq = 0

        def add_chunk(s: Sequence) -> None:
            nonlocal budget, context
            chunk = min(s.job.prompt_tokens - s.computed, budget)
            s.computed += chunk
            budget -= chunk
            context += s.computed
            chunks.append((s, chunk))

        def image_fits(img: int) -> bool:  # the first image of a step always fits
            nonlocal enc, enc_sq
            if enc and enc + img > enc_budget:
                return False
            enc += img
            enc_sq += img * img
            return True

        for s in [s for s in self.running if not s.prefilled]:  # prompts under way
            if budget <= 0:
                break
            if not s.encoded:  # admitted while the encoder budget was spent
                if not image_fits(s.job.image_tokens):
                    continue  # its image waits again; those behind it may go on
                s.encoded = True
            add_chunk(s)
        while budget > 0 and self.waiting and len(self.running) < m.max_num_seqs:
            job = self.waiting[0]
            need = self.blocks_tokens(job)
            if need > self.kv.level:
                break  # first come first served: the head waits for blocks, and all behind it
            self.waiting.popleft()
            self.kv.get(need)
            s = Sequence(job, need)
            self.running.append(s)
            if self.encoder_in_step and job.image_tokens and not image_fits(job.image_tokens):
                s.encoded = False  # admitted without its image: it is encoded in a later step
                continue
            add_chunk(s)
        if not decoders and not chunks:
            return decoders, chunks, 0.0  # nothing to run: the engine goes idle
        prefill = sum(c for _, c in chunks)
        duration = step_cost_s(m, prefill, len(decoders), context, enc, enc_sq) * self.heat.scale
        if m.cv > 0:
            duration = self.noise.draw(duration)  # a lognormal factor of mean 1 per step
        return decoders, chunks, duration

    def run(self) -> Process:
        """Step while there is work; sleep while there is none."""
        env = self.env
        while True:
            if not self.waiting:
                self._work = env.event()
                yield self._work
            self.heat.busy(self.unit, +1)
            while True:
                decoders, chunks, duration = self.plan_step()
                if not decoders and not chunks:
                    break
                yield env.timeout(duration)
                now = env.now
                for s in decoders:
                    s.tokens_out += 1
                    if s.tokens_out >= s.job.output_tokens:
                        self._finish(s, now)
                for s, _ in chunks:
                    if s.prefilled:
                        s.job.rec.first_token_s = now
                        s.tokens_out = 1
                        if s.job.output_tokens <= 1:
                            self._finish(s, now)
            self.heat.busy(self.unit, -1)

    def _finish(self, s: Sequence, now: SimTime) -> None:
        self.running.remove(s)
        self.kv.put(s.kv_blocks_tokens)
        rec = s.job.rec
        rec.last_token_s = rec.finished_s = now
        self.on_done(s.job)


class CorePool(simpy.Resource):
    """The CPU cores: a :class:`simpy.Resource` that also says which core a request got.

    A freed core passes at once to the first request waiting (the runtime's worker takes the next
    job from its queue); otherwise it joins the idle ones, and the one freed last is taken first.
    The number is the record's ``worker``, as the fast engine writes it.
    """

    def __init__(self, env: simpy.Environment, cores: int) -> None:
        super().__init__(env, capacity=cores)
        self.idle = list(range(cores - 1, -1, -1))
        self.core_of: dict[simpy.Event, int] = {}  # granted request → its core

    def _do_put(self, event: Request) -> None:  # a request, granted if a core is free
        if len(self.users) < self.capacity:
            self.core_of[event] = self.idle.pop()
        super()._do_put(event)

    def _do_get(self, event: Release) -> None:  # a release
        core = self.core_of.pop(event.request, None)
        if core is not None:
            self.idle.append(core)
        super()._do_get(event)
        self._trigger_put(None)  # the freed core goes to the next in line now


class Device:
    """One device: a CPU pool, an optional encoder unit, an engine and its heat."""

    def __init__(self, env: simpy.Environment, name: str, profile: DeviceProfile, seed: str,
                 on_done: Any) -> None:
        self.env = env
        self.name = name
        self.on_done = on_done
        st = profile.stages

        def service(stage: StageName) -> ServiceTime:  # one random stream per stage
            return ServiceTime(st[stage].model, Draws(f"{seed}:service:{name}:{stage.value}"))

        self.decode, self.resize, self.normalize = (service(s) for s in CPU_STAGE_NAMES)
        enc = st.get(StageName.ENCODE)
        self.encode = service(StageName.ENCODE) if enc is not None else None
        self.cpu_unit = st[StageName.IMAGE_DECODE].unit
        self.cpu = CorePool(env, profile.units[self.cpu_unit].count)
        # an encode stage on the CPU's unit runs in the worker after normalize; on another unit
        # it is a resource of its own; with none the engine encodes images inside its steps
        self.enc_unit = enc.unit if enc is not None else None
        self.encode_in_worker = self.enc_unit == self.cpu_unit
        self.encoder = (simpy.Resource(env, capacity=profile.units[enc.unit].count)
                        if enc is not None and not self.encode_in_worker else None)
        self.heat = Heat(env, profile)
        llm = profile.llm
        assert llm.step is not None  # (check_supported)
        self.handoff_s = llm.handoff_s
        self.input_processing = (Linear(llm.input_processing)
                                 if llm.input_processing is not None else None)
        self.engine = Engine(env, f"{name}/llm", llm.step, llm.kv_capacity_tokens, enc is None,
                             self.heat, st[StageName.PREFILL].unit,
                             Draws(f"{seed}:service:{name}:step"), on_done)

    def request(self, job: Job) -> Process:
        """One local request: CPU stages on a core, the encoder, the hand-off to the engine."""
        env = self.env
        rec = job.rec
        rec.preproc_queued_s = env.now
        with self.cpu.request() as core:
            yield core
            self.heat.busy(self.cpu_unit, +1)
            rec.preproc_start_s = env.now
            rec.worker = self.cpu.core_of[core]
            s = self.heat.scale  # the clock level when the worker starts holds for its whole job
            stages = [self.decode.sample(job) * s, self.resize.sample(job) * s,
                      self.normalize.sample(job) * s]
            if self.encode_in_worker:
                assert self.encode is not None
                stages.append(self.encode.sample(job) * s)
            yield env.timeout(stages[0])
            rec.decode_end_s = env.now
            yield env.timeout(stages[1])
            rec.resize_end_s = env.now
            yield env.timeout(stages[2])
            rec.normalize_end_s = env.now
            if self.encode_in_worker:
                yield env.timeout(stages[3])
                rec.encode_end_s = env.now
            self.heat.busy(self.cpu_unit, -1)
        if self.encoder is not None:
            assert self.encode is not None and self.enc_unit is not None
            with self.encoder.request() as unit:
                yield unit
                self.heat.busy(self.enc_unit, +1)
                yield env.timeout(self.encode.sample(job) * self.heat.scale)
                self.heat.busy(self.enc_unit, -1)
            rec.encode_end_s = env.now
        rec.preproc_end_s = env.now
        # the runtime's hand-off, then vLLM's input processing (queued at the hand-off)
        delay = self.handoff_s
        if self.input_processing is not None:
            delay += self.input_processing.mean_s(job)
        if delay > 0.0:
            yield env.timeout(delay)
            self.engine.submit(job)
            if self.input_processing is not None:
                rec.engine_queued_s = env.now - self.input_processing.mean_s(job)
        else:
            self.engine.submit(job)


class Model:
    """A scenario's devices as SimPy processes, fed by their workloads; :meth:`run` runs it."""

    def __init__(self, scenario: Scenario, seed: int | None = None,
                 env: simpy.Environment | None = None) -> None:
        check_supported(scenario)
        self.env = env if env is not None else simpy.Environment()
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.records: list[RequestRecord] = []
        self.max_requests = scenario.requests if scenario.requests is not None else math.inf
        self.duration_s = scenario.duration_s if scenario.duration_s is not None else math.inf
        self.arrived = 0
        self.in_system = 0  # requests arrived that have not left
        self.open_sources = 0  # workloads that may still bring requests
        self.finished = self.env.event()  # the last request has left and no more will come
        self.devices: list[Device] = []
        seed_s = str(self.seed)
        for entry in scenario.devices:
            for name, profile, workload, _ in instances(entry, seed_s):
                dev = Device(self.env, name, profile, seed_s, self._done)
                self.devices.append(dev)
                stream = arrivals(workload, random.Random(f"{seed_s}:workload:{name}"),
                                  entry.name, random.Random(f"{seed_s}:prefix:{name}")
                                  if workload.prefix.on else None)
                self.open_sources += 1
                self.env.process(self.workload(dev, stream, ImageGeometry(workload.image)))

    def run(self) -> list[RequestRecord]:
        """Run until the last request has left (processes of your own do not keep it going);
        every request's record, in the order they left."""
        self.env.run(until=self.finished)
        return self.records

    def _done(self, job: Job) -> None:
        self.records.append(job.rec)
        self.in_system -= 1
        self._check_finished()

    def _check_finished(self) -> None:
        if not self.open_sources and not self.in_system and not self.finished.triggered:
            self.finished.succeed()

    def workload(self, dev: Device, stream: Any, geom: ImageGeometry) -> Process:
        """A device's arrivals: each becomes a request process, up to the scenario's limits."""
        env = self.env
        arrival: Arrival
        for n, arrival in enumerate(stream, 1):
            t, w, h, b, text, out, deadline, prefix = arrival
            if t > self.duration_s or self.arrived >= self.max_requests:
                break
            yield env.timeout(t - env.now)
            if self.arrived >= self.max_requests:  # another device took the last one
                break
            self.arrived += 1
            self.in_system += 1
            th, tw, itok, dec = geom.target(w, h)
            rec = RequestRecord(
                id=f"{dev.name}-{n}", device=dev.name, arrived_s=t, image_bytes=b,
                num_images=1 if w else 0, source_width=w, source_height=h, target_width=tw,
                target_height=th, image_tokens=itok, prompt_tokens=text + itok,
                output_tokens=out, max_tokens=out, deadline_s=deadline,
                placement="local", decision_reason="always local")
            job = Job(rec, dev, w * h, tw * th, itok, text + itok, out, 0, dec)
            if prefix is not None:
                job.prefix_id = rec.prefix_id = prefix[0]
                job.prefix_tokens = rec.prefix_tokens = prefix[1]
            env.process(dev.request(job))
        self.open_sources -= 1
        self._check_finished()
