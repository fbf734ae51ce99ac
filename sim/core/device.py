"""An edge device: CPU cores, an optional vision encoder unit, an LLM engine, heat and a battery.

A local request walks::

    arrive ─▶ CPU queue ─▶ [core] image decode → resize → normalize ─▶ [NPU/GPU] encode
           ─▶ engine queue ─▶ prefill ─▶ decode (continuous batching) ─▶ finished

An offloaded one goes over the device's link instead (see :mod:`sim.core.network`, :mod:`sim.core.cloud`).

**Admission** (optional ``admission:``, the runtime's limits): a local request takes one of
``max_engine_queue`` engine slots before the CPU queue and gives it back at its first token (or
when it leaves without one); while none is free it waits in arrival order in front of
preprocessing (``preproc_queue`` time in its record). Beyond ``max_inflight`` admitted or
``max_pending`` waiting it is rejected (``Outcome.REJECTED``, an error starting ``429``).

**Shared cores** (optional ``host:``): on a CPU-only server the preprocessing workers and the
engine's threads share ``cores`` cores. Processor sharing is approximated at the start of each
service: preprocessing (decode, resize and normalize, one worker's job) started while ``busy``
workers (itself included) and, if the engine is mid-step, ``engine_threads`` want the cores takes
``max(1, demand / cores)`` times as long; an engine step started while ``busy`` workers run takes
``max(1, (engine_threads + busy) / cores)`` times as long, or ``κ`` seconds longer per second of
it that a worker is still busy when that is more (the step engine's ``stretch`` hook).
The factor is frozen when the service starts; it is not re-priced when demand changes during it.

The engine is a :class:`~sim.core.batching.BatchEngine` priced by the prefill and decode-step stage
models, or, when the profile has ``llm.step``, a :class:`~sim.core.step_engine.StepEngine` (vLLM V1
steps; the vision encoder runs inside them unless the profile has an ``encode`` stage).

**Power** is piecewise constant: ``base_w`` plus each unit's idle power, plus for every busy server
its ``active_w − idle_w`` times the DVFS level's ``power_scale``. Whenever a unit starts or stops
work the device integrates its RC thermal node, its energy and time-at-level exactly up to now and
re-plans the next trip-point crossing as an event (:mod:`sim.core.thermal`). **DVFS** stretches the
service times of work *started* at that level by the level's ``scale`` (work in progress keeps its
end time, except the decode batch, which is re-priced at once). The **battery** is drained by
device energy plus radio energy for transfers (``radio_w`` while sending or receiving); a device
with an empty battery fails new requests.
"""

from __future__ import annotations

import functools
import math
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from edgeserve.records import DeviceSample, Outcome
from sim.core.batching import BatchEngine, Engine, StepModel
from sim.core.battery import Battery
from sim.core.cloud import CloudServer
from sim.core.device_network import DeviceNetwork
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.offload import OffloadPath
from sim.core.service import Draws, Linear, ServiceTime, mean_of_sum
from sim.core.step_engine import StepEngine
from sim.core.thermal import PowerAllocatorGovernor, StepWiseGovernor, ThermalNode
from sim.scenario.config import LinkConfig
from sim.scenario.profiles import CPU_STAGE_NAMES, DeviceProfile, GovernorKind, StageName


class LocalModel(StepModel):
    """Prefill and decode-step times of the device's engine, from its stage models.

    ``prefill_s(job)``, ``prefill_draw_s(mean_s)`` and ``step_s(batch, context_tokens)`` call the
    models' native methods directly when compiled.
    """

    __slots__ = ("prefill", "step")

    def __init__(self, prefill: ServiceTime, step: ServiceTime) -> None:
        self.prefill = prefill
        self.step = step

    def prefill_s(self, job: Job) -> float:
        return self.prefill.mean_s(job)

    def prefill_draw_s(self, mean_s: float) -> float:
        """A prefill time spread around its mean."""
        return self.prefill.draw(mean_s)

    def step_s(self, batch: int, context_tokens: int) -> float:
        return self.step.step_mean_s(batch, context_tokens)


class Device:
    """One simulated device instance (a scenario entry with ``count: 3`` makes three)."""

    def __init__(self, loop: EventLoop, name: str, profile: DeviceProfile, link_cfg: LinkConfig,
                 cloud: CloudServer | None, seed: str,
                 on_finished: Callable[[Job], Any]) -> None:
        self.loop = loop
        self.name = name
        self.profile = profile
        self.cloud = cloud
        self.on_finished = on_finished
        # the way to the cloud (sim.core.offload): link, radio energy, offload estimate
        self.uplink = OffloadPath(loop, link_cfg, random.Random(f"{seed}:link:{name}"), cloud,
                                  on_finished)
        self.link = self.uplink.link
        self.link_cfg = link_cfg
        st = profile.stages

        def draws(stage: str) -> Draws:  # one stream per stage: policies do not shift each other's
            return Draws(f"{seed}:service:{name}:{stage}")

        self.decode = ServiceTime(st[StageName.IMAGE_DECODE].model, draws("image_decode"))
        self.resize = ServiceTime(st[StageName.RESIZE].model, draws("resize"))
        self.normalize = ServiceTime(st[StageName.NORMALIZE].model, draws("normalize"))
        enc = st.get(StageName.ENCODE)
        self.encode = ServiceTime(enc.model, draws("encode")) if enc is not None else None
        self._pre_mean = mean_of_sum(*(st[s].model for s in (*CPU_STAGE_NAMES, StageName.ENCODE)
                                       if s in st))
        self._enc_mean_s = 0.0  # running mean of encode times (queue-wait estimate)
        # units: index, servers, dynamic power
        names = list(profile.units)
        self.unit_names = names
        self._cap = [profile.units[n].count for n in names]
        self._dyn_w = [profile.units[n].active_w - profile.units[n].idle_w for n in names]
        self._busy = [0] * len(names)
        self._dyn_busy_w = 0.0  # Σ over busy servers of (active_w − idle_w), nominal clock
        self.static_w = profile.base_w + sum(u.idle_w * u.count for u in profile.units.values())
        self._cpu_u = names.index(st[StageName.IMAGE_DECODE].unit)
        self._enc_u = names.index(enc.unit) if enc is not None else -1
        # an encode stage on the CPU stages' unit runs in the worker, after normalize, as the
        # runtime's --encoder onnx does: the worker stays busy through it (no encoder queue)
        self.enc_in_worker = enc is not None and self._enc_u == self._cpu_u
        self._llm_u = names.index(st[StageName.PREFILL].unit)
        self.cores = self._cap[self._cpu_u]
        self._free_cores = list(range(self.cores - 1, -1, -1))
        self.cpu_queue: deque[Job] = deque()
        self.enc_servers = self._cap[self._enc_u] if enc is not None and not self.enc_in_worker \
            else 0
        self._enc_free = self.enc_servers
        self.enc_queue: deque[Job] = deque()
        # the event callbacks, bound once (binding at every push allocates a method object)
        self._cpu_done_cb: Callable[[Any], None] = self._cpu_done
        self._enc_done_cb: Callable[[Any], None] = self._enc_done
        self._submit_cb: Callable[[Any], None] = self._submit
        llm = profile.llm
        # admission limits (the runtime's engine slots and 429s)
        adm = profile.admission
        self.limited = adm is not None
        self.max_pending = adm.max_pending if adm is not None else 0
        self.max_inflight = adm.max_inflight if adm is not None else 0
        self.slots = 0
        if adm is not None:
            self.slots = adm.max_engine_queue if adm.max_engine_queue is not None else \
                2 * (llm.step.max_num_seqs if llm.step is not None else llm.max_batch)
        self.slots_held = 0  # admitted requests between their slot and their first token
        self.slot_queue: deque[Job] = deque()  # admitted, waiting for a slot (FIFO)
        self.admitted = 0  # admitted local requests that have not left (the runtime's inflight)
        engine_done = self._local_done if adm is not None else on_finished
        # cores shared by the cpu stages and the engine's threads
        host = profile.host
        self.shared = host is not None
        self.host_cores = host.cores if host is not None else 0
        self.engine_threads = host.engine_threads if host is not None else 0
        self.step_kappa = host.step_extra_s_per_worker_s if host is not None else 0.0
        self._worker_end = [0.0] * self.cores  # when each worker's current job ends
        self._step_engine: StepEngine | None = None  # the engine sharing the cores (host:)
        self.handoff_s = llm.handoff_s
        self._input: Linear | None = (Linear(llm.input_processing)
                                      if llm.input_processing is not None else None)
        llm_busy = functools.partial(self._busy_delta, self._llm_u)
        self.engine: Engine
        if llm.step is not None:  # vLLM V1 steps; the encoder runs in them unless it has a stage
            step_engine = StepEngine(loop, f"{name}/llm", llm.step, llm.kv_capacity_tokens,
                                     engine_done, llm_busy, enc is None, draws("step"))
            if host is not None:
                step_engine.stretch = self._step_stretch
                self._step_engine = step_engine
            self.engine = step_engine
        else:
            self.engine = BatchEngine(
                loop, f"{name}/llm",
                LocalModel(ServiceTime(st[StageName.PREFILL].model, draws("prefill")),
                           ServiceTime(st[StageName.DECODE_STEP].model, draws("decode_step"))),
                llm.kv_capacity_tokens, llm.max_batch, engine_done, llm_busy)
        self.variants: dict[str, BatchEngine] = {}
        for vname, v in profile.llm_variants.items():
            unit = names.index(v.unit)
            self.variants[vname] = BatchEngine(
                loop, f"{name}/llm:{vname}",
                LocalModel(ServiceTime(v.prefill, draws(f"{vname}:prefill")),
                           ServiceTime(v.decode_step, draws(f"{vname}:decode_step"))),
                v.kv_capacity_tokens, v.max_batch, engine_done,
                functools.partial(self._busy_delta, unit))
        for e in (self.engine, *self.variants.values()):
            e.finishes = True  # a local request ends with its last token (no downlink)
            if adm is not None:
                e.on_first_token = self._first_token
        # clock, heat, energy
        self.levels = profile.dvfs
        self.power_scales = [lv.power_scale for lv in profile.dvfs]
        self.level = 0
        self.scale = 1.0
        self.enc_scale = 1.0  # the encoder unit's clock (differs from scale on a network)
        self.llm_scale = 1.0  # the engine's unit's clock (likewise)
        self._ps = self.power_scales[0]
        self.power_w = self.static_w
        self.thermal = ThermalNode(profile.thermal, loop.now)
        self._t_last = loop.now
        self.energy_j = 0.0
        self.throttled_s = 0.0
        self._dyn_nominal_j = 0.0  # dynamic energy at nominal power scale (PID demand)
        self.governor_kind = profile.thermal.governor
        self._stepwise = self.governor_kind is GovernorKind.STEP_WISE
        self.stepwise = StepWiseGovernor(profile.thermal, len(profile.dvfs))
        self.pid = PowerAllocatorGovernor(profile.thermal.pid)
        self._thermal_at = math.inf
        self.active = True  # cleared when the simulation drains; stops periodic governors
        self.on_level: Callable[[Device], Any] | None = None  # called after each clock change
        self.battery = Battery(profile.battery) if profile.battery is not None else None
        # decisions
        self.decisions = 0
        self.offloaded = 0
        self._cpu_mean_s = 0.0
        # a thermal_network profile: two nodes, per-unit clocks and governors (sim.core.device_network)
        self.net: DeviceNetwork | None = None
        if profile.thermal_network is not None:
            self.net = DeviceNetwork(self, profile.thermal_network)
        elif self.governor_kind is GovernorKind.POWER_ALLOCATOR:
            self._pid_last_j = 0.0
            self._pid_last_t = loop.now
            self._dyn_max_w = sum(c * d for c, d in zip(self._cap, self._dyn_w, strict=True))
            loop.after(profile.thermal.pid.interval_s, self._on_pid)
        else:
            self.stepwise.update(self.thermal.temp_c)
            self._apply_level(self.stepwise.level)
            self._plan_thermal()

    # ---- views for policies and the UI ---------------------------------------------------
    @property
    def temp_c(self) -> float:
        self.account_until(self.loop.now)
        return self.thermal.temp_c

    @property
    def battery_capacity_wh(self) -> float | None:
        return self.battery.capacity_wh if self.battery is not None else None

    @property
    def battery_low_fraction(self) -> float:
        return self.battery.low_fraction if self.battery is not None else 0.0

    @property
    def battery_wh(self) -> float | None:
        if self.battery is None:
            return None
        self.account_until(self.loop.now)
        return self.battery.left_wh(self.energy_j + self.radio_j)

    @property
    def battery_fraction(self) -> float | None:
        if self.battery is None:
            return None
        self.account_until(self.loop.now)
        return self.battery.fraction(self.energy_j + self.radio_j)

    @property
    def battery_low(self) -> bool:
        if self.battery is None:
            return False
        self.account_until(self.loop.now)
        return self.battery.low(self.energy_j + self.radio_j)

    @property
    def queue_len(self) -> int:
        q = len(self.slot_queue) + len(self.cpu_queue) + len(self.enc_queue) \
            + len(self.engine.waiting)
        for e in self.variants.values():
            q += len(e.waiting)
        return q

    @property
    def running(self) -> int:
        n = (self.cores - len(self._free_cores)) + (self.enc_servers - self._enc_free)
        for e in (self.engine, *self.variants.values()):
            n += e.in_flight()
        return n

    @property
    def offload_share(self) -> float:
        return self.offloaded / self.decisions if self.decisions else 0.0

    def sample(self) -> DeviceSample:
        """The device's state now, in the trace schema."""
        now = self.loop.now
        self.account_until(now)
        battery_wh = None  # battery_wh, without integrating twice
        if self.battery is not None:
            battery_wh = self.battery.left_wh(self.energy_j + self.radio_j)
        level = self.level
        s = DeviceSample(
            t_s=now, device=self.name, temp_c=self.thermal.temp_c, clock_level=level,
            clock_scale=self.llm_scale, power_w=self.power_w, battery_wh=battery_wh,
            queue=self.queue_len, running=self.running,
            offload_share=self.offloaded / self.decisions if self.decisions else 0.0,
            throttled=level > 0)
        if self.net is not None:
            self.net.fill_sample(s)
        return s

    def estimate_local_s(self, job: Job) -> float:
        """Predicted latency if ``job`` ran here now (queues, clock and batch included)."""
        work = self._pre_mean.mean_s(job)  # image decode + resize + normalize + encode
        if self.cpu_queue:
            work += len(self.cpu_queue) * self._cpu_mean_s / self.cores
        if self.enc_queue:
            work += len(self.enc_queue) * self._enc_mean_s / self.enc_servers
        engine = job.engine if job.engine is not None else self.engine
        return work * self.scale + engine.estimate_s(job)

    def estimate_cloud_s(self, job: Job) -> float:
        """Predicted latency if ``job`` were offloaded now (``inf`` without a cloud server)."""
        return self.uplink.estimate_s(job)

    def estimate_local_j(self, job: Job) -> float | None:
        """Predicted energy of ``job`` here now (sim.core.energy_estimate; None without figures)."""
        return self.net.estimate_local_j(job) if self.net is not None else None

    def estimate_cloud_j(self, job: Job) -> float | None:
        """Predicted radio energy of offloading ``job`` now (None without a cloud server)."""
        return self.uplink.estimate_radio_j(job)

    # ---- power, heat, clock ----------------------------------------------------------------
    def account_until(self, now: float) -> None:
        """Account energy, throttled time and temperature from the last change up to ``now``
        (the device's figures are current only after this)."""
        if self.net is not None:
            self.net.integrate(now)
            return
        dt = now - self._t_last
        if dt > 0.0:
            p = self.power_w
            self.energy_j += p * dt
            self._dyn_nominal_j += (p - self.static_w) / self._ps * dt
            if self.level:
                self.throttled_s += dt
            self._t_last = now
            self.thermal.advance(now, p)  # the node's clock is the device's (_t_last)

    def _busy_delta(self, unit: int, delta: int) -> None:
        """A server of ``unit`` started (+1) or stopped (−1) work: power changes from now."""
        busy = self._busy
        b = busy[unit]
        busy[unit] = b + delta
        if (b < self._cap[unit]) if delta > 0 else (b <= self._cap[unit]):
            # beyond cap: a shared unit, already counted
            self._dyn_busy_w += delta * self._dyn_w[unit]
            self._power_changed()

    def _power_changed(self) -> None:
        if self.net is not None:
            self.net.power_changed()
            return
        self.account_until(self.loop.now)
        self.power_w = self.static_w + self._dyn_busy_w * self._ps
        if self._stepwise:
            self._plan_thermal()

    def _plan_thermal(self) -> None:
        """Schedule the next trip-point crossing under the present power, if it comes sooner."""
        gov = self.stepwise
        th = self.thermal
        ss = th.steady_c(self.power_w)
        t = math.inf
        a = gov.active
        if a < gov.n_trips and ss > gov.trip_c[a]:
            t = th.time_to(gov.trip_c[a], self.power_w)
        elif a > 0 and ss < gov.release_c[a - 1]:
            t = th.time_to(gov.release_c[a - 1], self.power_w)
        if t < math.inf:
            at = self.loop.now + t
            if at < self._thermal_at:
                self._thermal_at = at
                self.loop.at(at, self._on_thermal, at)

    def _on_thermal(self, arg: Any) -> None:
        if arg != self._thermal_at:
            self.loop.superseded += 1
            return  # superseded by an earlier crossing
        self._thermal_at = math.inf
        self.account_until(self.loop.now)
        level = self.stepwise.update(self.thermal.temp_c, 1e-6)
        if level != self.level:
            self._apply_level(level)
        self._plan_thermal()

    def _on_pid(self, arg: Any) -> None:
        """Power-allocator tick. Far below the control temperature the governor sleeps: the next
        tick is when the node could first reach ``switch_on`` even at full power."""
        now = self.loop.now
        pid_cfg = self.profile.thermal.pid
        self.account_until(now)
        dt = now - self._pid_last_t
        self._pid_last_t = now
        demand_w = (self._dyn_nominal_j - self._pid_last_j) / dt if dt > 0 else 0.0
        self._pid_last_j = self._dyn_nominal_j
        temp = self.thermal.temp_c
        switch_on = pid_cfg.control_temp_c - pid_cfg.switch_on_below_c
        if temp < switch_on:
            self.pid.reset()
            if self.level != 0:
                self._apply_level(0)
            wait = self.thermal.time_to(switch_on, self.static_w + self._dyn_max_w)
            wait = max(pid_cfg.interval_s, wait if wait < math.inf else pid_cfg.interval_s * 100)
        else:
            budget = self.pid.budget_w(temp, dt)
            level = self.pid.choose(budget, self.static_w, demand_w, self.power_scales)
            if level != self.level:
                self._apply_level(level)
            wait = pid_cfg.interval_s
        if self.active:
            self.loop.after(wait, self._on_pid)

    def _apply_level(self, level: int) -> None:
        self.account_until(self.loop.now)
        self.level = level
        self.scale = self.enc_scale = self.llm_scale = self.levels[level].scale
        self._ps = self.power_scales[level]
        self._power_changed()
        self.engine.retime(self.scale)
        for e in self.variants.values():
            e.retime(self.scale)
        if self.on_level is not None:
            self.on_level(self)

    def set_level(self, level: int) -> None:
        """Force a clock level (tests, what-if UIs); the governor may change it again."""
        if self.net is not None:
            self.net.force(level)
            return
        self._apply_level(max(0, min(level, len(self.levels) - 1)))

    # ---- the local pipeline -----------------------------------------------------------------
    def admit(self, job: Job) -> None:
        """Run ``job`` here: queue it for a CPU core (with admission limits, for a slot first)."""
        if self.limited:
            self._admit_limited(job)
            return
        job.rec.preproc_queued_s = self.loop.now
        if self._free_cores:
            self._start_cpu(job)
        else:
            self.cpu_queue.append(job)

    def _admit_limited(self, job: Job) -> None:
        """The runtime's admission: reject (429) beyond its limits, else take an engine slot or
        wait for one in front of preprocessing (the wait counts as ``preproc_queue`` time)."""
        rec = job.rec
        now = self.loop.now
        why = ""  # the runtime's checks, in its order
        if self.admitted >= self.max_inflight:
            why = f"max_inflight {self.max_inflight} requests admitted"
        elif self.slots_held >= self.slots and len(self.slot_queue) >= self.max_pending:
            why = f"max_pending {self.max_pending} requests wait for one of {self.slots} " \
                  f"engine slots"
        elif rec.num_images and not self._free_cores and len(self.cpu_queue) >= self.max_pending:
            why = f"{len(self.cpu_queue)} requests wait for a preprocessing worker " \
                  f"(max_pending {self.max_pending})"
        if why:
            rec.outcome = Outcome.REJECTED
            rec.error = f"429 server is at capacity: {why}; retry later"
            rec.finished_s = now
            self.on_finished(job)
            return
        self.admitted += 1
        rec.preproc_queued_s = now
        if self.slots_held < self.slots:  # (a free slot means nobody waits for one)
            self.slots_held += 1
            self._to_cpu(job)
        else:
            self.slot_queue.append(job)

    def _to_cpu(self, job: Job) -> None:
        if self._free_cores:
            self._start_cpu(job)
        else:
            self.cpu_queue.append(job)

    def _release_slot(self) -> None:
        """A slot is given back: it passes straight to the first request waiting for one."""
        if self.slot_queue:
            self._to_cpu(self.slot_queue.popleft())
        else:
            self.slots_held -= 1

    def _first_token(self, job: Job) -> None:
        self._release_slot()

    def _local_done(self, job: Job) -> None:
        """A local request left its engine (finished or failed) under admission limits."""
        if job.rec.first_token_s is None:  # failed before its first token: its slot is free
            self._release_slot()
        self.admitted -= 1
        self.on_finished(job)

    def _step_stretch(self, step_s: float) -> float:
        """An engine step of ``step_s`` starting now, lengthened for sharing the host's cores with
        the ``b`` busy preprocessing workers: the larger of the cores' share,
        ``step_s × (engine_threads + b) / cores``, and the measured slowdown,
        ``step_s + κ × (the seconds of the step during which each worker is still busy)``."""
        now = self.loop.now
        busy = 0
        overlap = 0.0
        for end in self._worker_end:
            if end > now:
                busy += 1
                overlap += end - now if end - now < step_s else step_s
        demand = self.engine_threads + busy
        share = step_s * demand / self.host_cores if demand > self.host_cores else step_s
        measured = step_s + self.step_kappa * overlap
        return measured if measured > share else share

    def _start_cpu(self, job: Job, newly_busy: bool = True) -> None:
        now = self.loop.now
        rec = job.rec
        rec.worker = self._free_cores.pop()
        clock = s = self.scale
        if self.shared:  # busy workers (this one included) and a stepping engine share the cores
            demand = self.cores - len(self._free_cores)
            if self.engine.busy:
                demand += self.engine_threads
            if demand > self.host_cores:
                s *= demand / self.host_cores
        t1 = now + self.decode.sample(job) * s
        t2 = t1 + self.resize.sample(job) * s
        t3 = t2 + self.normalize.sample(job) * s
        end = t3
        if self.enc_in_worker:
            enc = self.encode
            assert enc is not None
            end = t3 + enc.sample(job) * s
            rec.encode_end_s = end
        m = self._cpu_mean_s
        self._cpu_mean_s = m + 0.05 * ((end - now) / clock - m)
        rec.preproc_start_s = now
        rec.decode_end_s = t1
        rec.resize_end_s = t2
        rec.normalize_end_s = t3
        if self.shared:
            self._worker_end[rec.worker] = end
            if self.step_kappa > 0.0 and self._step_engine is not None \
                    and self._step_engine.stepping:  # the running step shares the cores with it
                e = self._step_engine
                left = e.step_end_s - now
                e.extend(self.step_kappa * (left if left < end - now else end - now))
        if newly_busy:
            self._busy_delta(self._cpu_u, 1)
        self.loop.at(end, self._cpu_done_cb, job)

    def _cpu_done(self, arg: Any) -> None:
        job: Job = arg
        self._free_cores.append(job.rec.worker)  # type: ignore[arg-type]
        cpu_queue = self.cpu_queue
        if cpu_queue:  # the core goes straight to the next job: power unchanged
            self._start_cpu(cpu_queue.popleft(), False)
        else:
            self._busy_delta(self._cpu_u, -1)
        if self.encode is not None and not self.enc_in_worker:
            if self._enc_free:
                self._start_enc(job)
            else:
                self.enc_queue.append(job)
        else:
            job.rec.preproc_end_s = self.loop.now
            self._hand_off(job)

    def _start_enc(self, job: Job, newly_busy: bool = True) -> None:
        enc = self.encode
        assert enc is not None
        if newly_busy:
            self._enc_free -= 1
            self._busy_delta(self._enc_u, 1)
        d = enc.sample(job)
        m = self._enc_mean_s
        self._enc_mean_s = m + 0.05 * (d - m)
        loop = self.loop
        loop.at(loop.now + d * self.enc_scale, self._enc_done_cb, job)

    def _enc_done(self, arg: Any) -> None:
        job: Job = arg
        if self.enc_queue:
            self._start_enc(self.enc_queue.popleft(), False)
        else:
            self._enc_free += 1
            self._busy_delta(self._enc_u, -1)
        now = self.loop.now
        job.rec.encode_end_s = now
        job.rec.preproc_end_s = now
        self._hand_off(job)

    def _hand_off(self, job: Job) -> None:
        """Preprocessed: to the engine after the runtime's hand-off (``llm.handoff_s``) and vLLM's
        input processing (``llm.input_processing``); the record's ``engine_queued_s`` is when
        the runtime handed it over, as the runtime stamps it."""
        delay = self.handoff_s
        if self._input is not None:
            delay += self._input.mean_s(job)
        if delay > 0.0:
            self.loop.at(self.loop.now + delay, self._submit_cb, job)
        else:
            (job.engine or self.engine).submit(job)

    def _submit(self, arg: Any) -> None:
        job: Job = arg
        (job.engine or self.engine).submit(job)
        if self._input is not None:  # queued at the hand-off, schedulable only now
            job.rec.engine_queued_s = self.loop.now - self._input.mean_s(job)

    # ---- offloading (sim.core.offload) ----------------------------------------------------
    @property
    def radio_j(self) -> float:
        """Radio energy of this device's transfers so far."""
        return self.uplink.radio_j

    def offload(self, job: Job) -> None:
        """Send ``job`` (its JPEG bytes and prompt) to the cloud server."""
        self.uplink.send(job)

    def cloud_done(self, job: Job) -> None:
        """The cloud finished ``job``; its answer comes back over the downlink."""
        self.uplink.cloud_done(job)
