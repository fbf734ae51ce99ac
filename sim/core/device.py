"""An edge device assembled from its parts: CPU workers, an encoder unit, an engine, heat, a battery.

A local request walks::

    arrive ─▶ [admission] ─▶ CPU queue ─▶ [core] image decode → resize → normalize ─▶ [NPU/GPU] encode
           ─▶ engine queue ─▶ prefill ─▶ decode (continuous batching) ─▶ finished

An offloaded one goes over the device's link instead (see :mod:`sim.core.network`, :mod:`sim.core.cloud`).

Each part is a module of its own, testable alone; :class:`Device` wires them and offers policies
and the UI one view of them (:class:`~sim.core.device_view.DeviceView`):

* :mod:`sim.core.admission` — the runtime's engine slots and 429 limits (a profile's ``admission:``);
* :mod:`sim.core.cpu_pool` — the preprocessing workers, with the cores they share with the engine's
  threads on a CPU-only server (``host:``);
* :mod:`sim.core.encoder_unit` — the vision encoder on a unit of its own;
* the engine: a :class:`~sim.core.batching.BatchEngine` priced by the prefill and decode-step stage
  models, or, when the profile has ``llm.step``, a :class:`~sim.core.step_engine.StepEngine` (vLLM
  V1 steps; the vision encoder runs inside them unless the profile has an ``encode`` stage);
* :mod:`sim.core.unit_power` and :mod:`sim.core.heat` — power, energy, one RC node and its DVFS
  governor; or :mod:`sim.core.device_network` for a ``thermal_network:`` profile (two nodes, a
  clock per unit);
* :mod:`sim.core.battery` — drained by device energy plus radio energy;
* :mod:`sim.core.offload` — the way to the cloud.

**DVFS** stretches the service times of work *started* at a level by the level's ``scale`` (work in
progress keeps its end time, except the decode batch, which is re-priced at once). A device with
an empty battery fails new requests.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from edgeserve.records import DeviceSample
from sim.core.admission import Admission
from sim.core.batching import BatchEngine, Engine, StepModel
from sim.core.battery import Battery
from sim.core.cloud import CloudServer
from sim.core.cpu_pool import CpuPool
from sim.core.device_network import DeviceNetwork
from sim.core.encoder_unit import EncoderUnit
from sim.core.heat import Heat, NodeHeat
from sim.core.job import Job
from sim.core.link_estimate import LinkEstimate
from sim.core.loop import EventLoop
from sim.core.observed_estimate import ObservedEstimate
from sim.core.offload import OffloadPath
from sim.core.service import Draws, Linear, ServiceTime, mean_of_sum
from sim.core.step_engine import StepEngine
from sim.core.unit_power import UnitPower
from sim.scenario.config import LinkConfig
from sim.scenario.profiles import CPU_STAGE_NAMES, DeviceProfile, StageName


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

        # units and their power (sim.core.unit_power)
        self.power = UnitPower(profile)
        names = self.power.names
        self.unit_names = names
        self._busy_cb: Callable[[int, int], None] = self._busy_delta  # bound once
        # the CPU workers and the encoder (sim.core.cpu_pool, sim.core.encoder_unit): an encode
        # stage on the CPU stages' unit runs in the worker, after normalize, as the runtime's
        # --encoder onnx does (no encoder queue)
        cpu_u = names.index(st[StageName.IMAGE_DECODE].unit)
        enc = st.get(StageName.ENCODE)
        encode = ServiceTime(enc.model, draws("encode")) if enc is not None else None
        enc_u = names.index(enc.unit) if enc is not None else -1
        self.enc_in_worker = enc is not None and enc_u == cpu_u
        self.cores = self.power.cap[cpu_u]
        self.cpu = CpuPool(loop, self.cores, cpu_u,
                           ServiceTime(st[StageName.IMAGE_DECODE].model, draws("image_decode")),
                           ServiceTime(st[StageName.RESIZE].model, draws("resize")),
                           ServiceTime(st[StageName.NORMALIZE].model, draws("normalize")),
                           encode if self.enc_in_worker else None, profile.host,
                           self._busy_cb, self._cpu_done)
        self.encoder: EncoderUnit | None = None
        if encode is not None and not self.enc_in_worker:
            self.encoder = EncoderUnit(loop, self.power.cap[enc_u], enc_u, encode,
                                       self._busy_cb, self._preprocessed)
        self.enc_servers = self.encoder.servers if self.encoder is not None else 0
        self._pre_mean = mean_of_sum(*(st[s].model for s in (*CPU_STAGE_NAMES, StageName.ENCODE)
                                       if s in st))
        self._submit_cb: Callable[[Any], None] = self._submit  # bound once
        llm = profile.llm
        # admission limits (sim.core.admission): the runtime's engine slots and 429s
        self.admission: Admission | None = None
        if profile.admission is not None:
            self.admission = Admission(
                loop, profile.admission,
                llm.step.max_num_seqs if llm.step is not None else llm.max_batch, self.cpu,
                on_finished)
        engine_done = self.admission.done if self.admission is not None else on_finished
        self.handoff_s = llm.handoff_s
        self._input: Linear | None = (Linear(llm.input_processing)
                                      if llm.input_processing is not None else None)
        self.llm_unit = names.index(st[StageName.PREFILL].unit)
        llm_busy = functools.partial(self._busy_delta, self.llm_unit)
        self.engine: Engine
        if llm.step is not None:  # vLLM V1 steps; the encoder runs in them unless it has a stage
            self.engine = StepEngine(loop, f"{name}/llm", llm.step, llm.kv_capacity_tokens,
                                     engine_done, llm_busy, enc is None, draws("step"))
        else:
            self.engine = BatchEngine(
                loop, f"{name}/llm",
                LocalModel(ServiceTime(st[StageName.PREFILL].model, draws("prefill")),
                           ServiceTime(st[StageName.DECODE_STEP].model, draws("decode_step"))),
                llm.kv_capacity_tokens, llm.max_batch, engine_done, llm_busy)
        if profile.host is not None:  # the engine's threads share the workers' cores
            self.cpu.share_with(self.engine)
        self.variants: dict[str, BatchEngine] = {}
        for vname, v in profile.llm_variants.items():
            self.variants[vname] = BatchEngine(
                loop, f"{name}/llm:{vname}",
                LocalModel(ServiceTime(v.prefill, draws(f"{vname}:prefill")),
                           ServiceTime(v.decode_step, draws(f"{vname}:decode_step"))),
                v.kv_capacity_tokens, v.max_batch, engine_done,
                functools.partial(self._busy_delta, names.index(v.unit)))
        for e in (self.engine, *self.variants.values()):
            e.finishes = True  # a local request ends with its last token (no downlink)
            if self.admission is not None:
                e.on_first_token = self.admission.first_token
        # clock levels (set by the heat model through _clock_level or the network's _apply)
        self.levels = profile.dvfs
        self.level = 0
        self.llm_scale = 1.0  # the engine's unit's clock (differs from scale on a network)
        self.on_level: Callable[[Device], Any] | None = None  # called after each clock change
        self.battery = Battery(profile.battery) if profile.battery is not None else None
        # decisions
        self.decisions = 0
        self.offloaded = 0
        # the gateway's local estimate in place of the model's (a device entry's
        # observed_estimate; set and fed by the simulation)
        self.observed: ObservedEstimate | None = None
        # the gateway's cloud estimate in place of the model's (a device entry's
        # observed_cloud_estimate; set and fed by the simulation)
        self.observed_link: LinkEstimate | None = None
        # heat: a thermal_network profile has two nodes and per-unit clocks and governors
        # (sim.core.device_network), any other one node (sim.core.heat)
        self.net: DeviceNetwork | None = None
        self.heat: Heat
        if profile.thermal_network is not None:
            self.net = DeviceNetwork(self, profile.thermal_network)
            self.heat = self.net
        else:
            node = NodeHeat(loop, self.power, profile, self._clock_level)
            self.heat = node
            node.start()

    # ---- views for policies and the UI ---------------------------------------------------
    @property
    def scale(self) -> float:
        """The clock's stretch of image work started now (1.0 at full clock)."""
        return self.cpu.scale

    @property
    def enc_scale(self) -> float:
        """The encoder unit's clock stretch (differs from :attr:`scale` on a network)."""
        return self.encoder.scale if self.encoder is not None else self.cpu.scale

    @property
    def energy_j(self) -> float:
        """Device energy up to the last accounting (:meth:`account_until`)."""
        return self.heat.energy_j

    @property
    def throttled_s(self) -> float:
        return self.heat.throttled_s

    @property
    def power_w(self) -> float:
        return self.heat.power_w

    @property
    def static_w(self) -> float:
        return self.heat.static_w

    @property
    def temp_c(self) -> float:
        self.account_until(self.loop.now)
        return self.heat.junction_c()

    @property
    def slots_held(self) -> int:
        return self.admission.slots_held if self.admission is not None else 0

    @property
    def admitted(self) -> int:
        return self.admission.admitted if self.admission is not None else 0

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
        return self.battery.left_wh(self.heat.energy_j + self.radio_j)

    @property
    def battery_fraction(self) -> float | None:
        if self.battery is None:
            return None
        self.account_until(self.loop.now)
        return self.battery.fraction(self.heat.energy_j + self.radio_j)

    @property
    def battery_low(self) -> bool:
        if self.battery is None:
            return False
        self.account_until(self.loop.now)
        return self.battery.low(self.heat.energy_j + self.radio_j)

    @property
    def queue_len(self) -> int:
        q = len(self.cpu.queue) + len(self.engine.waiting)
        if self.admission is not None:
            q += len(self.admission.slot_queue)
        if self.encoder is not None:
            q += len(self.encoder.queue)
        for e in self.variants.values():
            q += len(e.waiting)
        return q

    @property
    def running(self) -> int:
        n = self.cpu.busy
        if self.encoder is not None:
            n += self.encoder.busy
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
        heat = self.heat
        battery_wh = None  # battery_wh, without integrating twice
        if self.battery is not None:
            battery_wh = self.battery.left_wh(heat.energy_j + self.radio_j)
        level = self.level
        s = DeviceSample(
            t_s=now, device=self.name, temp_c=heat.junction_c(), clock_level=level,
            clock_scale=self.llm_scale, power_w=heat.power_w, battery_wh=battery_wh,
            queue=self.queue_len, running=self.running,
            offload_share=self.offloaded / self.decisions if self.decisions else 0.0,
            throttled=level > 0)
        if self.net is not None:
            self.net.fill_sample(s)
        return s

    def estimate_local_s(self, job: Job) -> float:
        """Predicted latency if ``job`` ran here now (queues, clock and batch included); with
        :attr:`observed`, the gateway's estimate instead: the idle prediction × the observed ratio
        × (1 + :attr:`queue_len`)."""
        if self.observed is not None:
            return self.observed.estimate_s(job, self.queue_len)
        work = self._pre_mean.mean_s(job)  # image decode + resize + normalize + encode
        cpu = self.cpu
        if cpu.queue:
            work += len(cpu.queue) * cpu.mean_s / cpu.cores
        enc = self.encoder
        if enc is not None and enc.queue:
            work += len(enc.queue) * enc.mean_s / enc.servers
        engine = job.engine if job.engine is not None else self.engine
        return work * cpu.scale + engine.estimate_s(job)

    def estimate_cloud_s(self, job: Job) -> float:
        """Predicted latency if ``job`` were offloaded now (``inf`` without a cloud server); with
        :attr:`observed_link`, the gateway's estimate instead: the moving round trip + the upload at
        the moving rate + the moving service time."""
        est = self.observed_link
        if est is not None and self.cloud is not None:
            return est.estimate_s(job)
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
        self.heat.integrate(now)

    def _busy_delta(self, unit: int, delta: int) -> None:
        """A server of ``unit`` started (+1) or stopped (−1) work: power changes from now."""
        if self.power.delta(unit, delta):
            self.heat.power_changed()

    def _clock_level(self, level: int) -> None:
        """The single node's governor chose ``level``: one clock for the whole device."""
        self.level = level
        scale = self.levels[level].scale
        self.cpu.scale = scale
        if self.encoder is not None:
            self.encoder.scale = scale
        self.llm_scale = scale
        self.engine.retime(scale)
        for e in self.variants.values():
            e.retime(scale)
        if self.on_level is not None:
            self.on_level(self)

    def set_level(self, level: int) -> None:
        """Force a clock level (tests, what-if UIs); the governor may change it again."""
        self.heat.force(level)

    def stop_governors(self) -> None:
        """The simulation drains: periodic governors stop ticking."""
        self.heat.active = False

    # ---- the local pipeline -----------------------------------------------------------------
    def admit(self, job: Job) -> None:
        """Run ``job`` here: queue it for a CPU core (with admission limits, for a slot first)."""
        if self.admission is not None:
            self.admission.admit(job)
            return
        job.rec.preproc_queued_s = self.loop.now
        self.cpu.submit(job)

    def _cpu_done(self, job: Job) -> None:
        """The image stages are done: to the encoder unit, or to the engine."""
        if self.encoder is not None:
            self.encoder.submit(job)
        else:
            job.rec.preproc_end_s = self.loop.now
            self._hand_off(job)

    def _preprocessed(self, job: Job) -> None:
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


def idle_device(profile: DeviceProfile, name: str = "idle") -> Device:
    """A device of ``profile`` that nothing runs on (its own loop, no link, no cloud): its
    :meth:`Device.estimate_local_s` is the profile's prediction for a job on an idle device."""
    return Device(EventLoop(), name, profile, LinkConfig(), None, name, _ignore)


def _ignore(job: Job) -> None:
    pass
