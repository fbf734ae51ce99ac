"""The simulation: devices, links and cloud servers on one clock, fed by workloads, steered by a policy.

Use it whole (``Simulation(scenario).run()`` → :class:`~sim.core.report.Summary`) or step by step, the
way the terminal UI does::

    sim = Simulation(load_scenario(), trace_path="out/sim.jsonl")
    sim.add_record_sink(on_record)          # every finished RequestRecord
    sim.add_sample_sink(on_sample)          # every DeviceSample (each sample_interval_s)
    sim.add_migration_sink(on_migration)    # every MigrationDecision (handed over with the samples)
    while not sim.finished:
        sim.run_until(sim.now_s + 1.0)      # advance one simulated second
        states = sim.device_states()        # temperature, clock, battery, queue, offload share
        sim.set_policy("thermal_aware")     # switch policy while it runs
    summary = sim.close()

Records are written to the trace (if any) in batches as requests finish, and folded into streaming
statistics; nothing per-request is kept, except the last ``recent_size`` records for the UI.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import simpy

from edgeserve.records import (
    DeviceSample,
    MigrationDecision,
    Outcome,
    RequestRecord,
    TraceHeader,
    TraceItem,
    TraceWriter,
)
from sim.core.cloud import CloudServer
from sim.core.device import Device, idle_device
from sim.core.fleet import instances
from sim.core.job import Job
from sim.core.link_estimate import (
    RTT_PRIOR_S,
    SERVICE_PRIOR_S,
    UPLINK_PRIOR_BPS,
    LinkEstimate,
)
from sim.core.loop import EventLoop
from sim.core.observed_estimate import ObservedEstimate
from sim.core.policies import Placement, Policy, make_policy
from sim.core.report import Summary, summarize
from sim.core.stats import StatsCollector
from sim.core.workload import Arrival, ImageGeometry, arrivals
from sim.scenario.config import CloudEstimatePrior, PolicyConfig, Scenario
from sim.scenario.schema import ConfigError

RecordSink = Callable[[RequestRecord], Any]
SampleSink = Callable[[DeviceSample], Any]
MigrationSink = Callable[[MigrationDecision], Any]
#: a SimPy process function: called as ``fn(env, *args)``, it returns the process's generator
ProcessFunction = Callable[..., Generator[simpy.Event, Any, Any]]

_BATCH = 256  # records per fold and per msgspec call: small enough to stay in the L2 cache


class _Source:
    """The arrival stream of one device."""

    __slots__ = ("cache", "device", "geom", "it", "n", "next")

    def __init__(self, device: Device, it: Iterator[Arrival], geom: ImageGeometry) -> None:
        self.device = device
        self.it = it
        self.geom = geom
        self.cache = geom.cache  # (width, height) → geom.target(width, height), once computed
        self.n = 0
        self.next: Arrival | None = None


class Simulation:
    """A discrete-event run of one scenario; see the module docstring for the stepping API."""

    def __init__(self, scenario: Scenario, policy: Policy | PolicyConfig | str | None = None,
                 trace_path: str | Path | None = None, seed: int | None = None,
                 recent_size: int = 100) -> None:
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.policy = make_policy(policy if policy is not None else scenario.policy)
        self.loop = EventLoop()
        self._stats = StatsCollector(scenario.slo.e2e_s, scenario.slo.ttft_s,
                                     scenario.per_device_detail)
        self._recent: deque[RequestRecord] = deque(maxlen=recent_size)
        self._pending: list[RequestRecord] = []  # finished, not yet folded into stats and recent
        self._record_sinks: list[RecordSink] = []
        self._sample_sinks: list[SampleSink] = []
        self._migration_sinks: list[MigrationSink] = []
        self._buf: list[TraceItem] = []
        self.writer: TraceWriter | None = None
        seed_s = str(self.seed)
        self.clouds: dict[str, CloudServer] = {
            c.name: CloudServer(self.loop, c.name, c.profile, c.replica_count,
                                self._cloud_done, seed_s, c.deployment)
            for c in scenario.cloud
        }
        default_cloud = next(iter(self.clouds.values()), None)
        self.devices: list[Device] = []
        self._sources: list[_Source] = []
        for entry in scenario.devices:
            cloud = self.clouds[entry.cloud] if entry.cloud is not None else default_cloud
            for name, profile, workload, link in instances(entry, seed_s):  # count, jitter
                dev = Device(self.loop, name, profile, link, cloud, seed_s, self._finished)
                if entry.observed_estimate:  # the gateway's local estimate (see _observe)
                    dev.observed = ObservedEstimate(idle_device(profile, name).estimate_local_s)
                if entry.observed_cloud_estimate and cloud is not None:  # (see _observe_call)
                    dev.observed_link = self._link_estimate(entry.cloud_estimate_prior, dev)
                self.devices.append(dev)
                self._stats.register(name, entry.name)
                stream = arrivals(workload, random.Random(f"{seed_s}:workload:{name}"),
                                  entry.name, random.Random(f"{seed_s}:prefix:{name}")
                                  if workload.prefix.on else None)
                src = _Source(dev, stream, ImageGeometry(workload.image))
                self._sources.append(src)
        if trace_path is not None:
            self.writer = TraceWriter(trace_path, TraceHeader(
                producer="edgeserve sim", clock="sim",
                meta={"scenario": scenario.name, "policy": self.policy.name, "seed": self.seed,
                      "devices": self.device_facts()}))
        self.max_requests = scenario.requests if scenario.requests is not None else math.inf
        self.duration_s = scenario.duration_s if scenario.duration_s is not None else math.inf
        self.arrived = 0
        self.completed = 0
        self.in_system = 0
        self._area = 0.0  # ∫ requests in system dt (Little's law)
        self._area_t = 0.0
        self._open_sources = 0
        # bound once (binding at every push allocates a method object); enum members as
        # attributes (a class attribute of an enum is a slow lookup from compiled code)
        self._arrival_cb: Callable[[Any], None] = self._on_arrival
        self._local = Placement.LOCAL
        self._cloud = Placement.CLOUD
        for src in self._sources:
            self._queue_next(src)
        self.loop.at(0.0, self._on_sample)
        self._closed = False

    # ---- stepping API --------------------------------------------------------------------
    @property
    def stats(self) -> StatsCollector:
        """Streaming statistics of every request that has left so far."""
        self._fold()
        return self._stats

    @property
    def recent(self) -> deque[RequestRecord]:
        """The last ``recent_size`` records that left the system."""
        self._fold()
        return self._recent

    def _fold(self) -> None:
        """Fold the finished records kept since the last fold into stats and ``recent``."""
        pending = self._pending
        if pending:
            self._stats.on_records(pending)
            self._recent.extend(pending)
            pending.clear()

    @property
    def now_s(self) -> float:
        return self.loop.now

    @property
    def finished(self) -> bool:
        """No more arrivals will come and every request has left."""
        return self._open_sources == 0 and self.in_system == 0

    def run_until(self, t_s: float) -> None:
        """Advance the simulation to simulated time ``t_s`` (or until nothing is left to do)."""
        self.loop.run_until(t_s)

    def run(self, progress: bool = False) -> Summary:
        """Run to the end (all arrivals served) and return the summary; closes the trace."""
        if not progress:
            self.loop.run_until(math.inf)
            return self.close()
        from tqdm import tqdm

        total = None if self.max_requests == math.inf else int(self.max_requests)
        with tqdm(total=total, unit="req", desc=self.scenario.name, mininterval=0.5) as bar:
            step = self.scenario.sample_interval_s * 50
            while not self.loop.stopped and self.loop.next_time() < math.inf:
                self.loop.run_until(self.loop.now + step)
                bar.update(self.completed - bar.n)
        return self.close()

    @property
    def env(self) -> simpy.Environment:
        """The run's :class:`simpy.Environment`: ``env.now`` is the simulated time, and a process
        started in it (``env.process(gen)``, or :meth:`process`) runs among the devices' events.
        Drive the run with :meth:`run` or :meth:`run_until`, not ``env.run``."""
        return self.loop.env

    def process(self, fn: ProcessFunction, *args: Any) -> simpy.Process:
        """Start ``fn(env, *args)`` as a SimPy process beside the built-in devices (a sensor, an
        operator, a what-if); it returns the :class:`simpy.Process` (an event that fires when
        the generator returns). It reads and acts on the model through the objects it is given
        (``sim.devices``, ``sim.device_states()``, ``device.set_level``, …). It does not keep
        the run alive: :meth:`run` ends when the last request leaves, whatever processes wait."""
        env = self.loop.env
        return env.process(fn(env, *args))

    def set_policy(self, policy: Policy | PolicyConfig | str) -> None:
        """Switch the policy; decisions from now on use the new one."""
        self.policy = make_policy(policy)

    def add_record_sink(self, fn: RecordSink) -> None:
        """Call ``fn(record)`` for every request that leaves the system (finished, failed, dropped)."""
        self._record_sinks.append(fn)

    def record_token_times(self) -> None:
        """Give every request of a device's step engine its output tokens' times
        (``token_times_s``, as the runtime records them), so inter-token latencies can be compared
        with a measured run. Keeps every step's end in memory: for validation-sized runs."""
        from sim.core.step_engine import StepEngine

        for d in self.devices:
            if isinstance(d.engine, StepEngine):
                d.engine.record_token_times = True

    def add_sample_sink(self, fn: SampleSink) -> None:
        """Call ``fn(sample)`` for every periodic :class:`~edgeserve.records.DeviceSample`."""
        self._sample_sinks.append(fn)

    def add_migration_sink(self, fn: MigrationSink) -> None:
        """Call ``fn(decision)`` for every stage migration of a device with a thermal network.

        Moves are decided at the network's polls and handed over at the next device sample (and
        at :meth:`close`), before that sample; the trace gets them in the same order.
        """
        self._migration_sinks.append(fn)

    def _take_migrations(self, d: Device) -> None:
        if d.net is None:
            return
        for m in d.net.take_migrations():
            for sink in self._migration_sinks:
                sink(m)
            if self.writer is not None:
                self._buf.append(m)

    def device_facts(self) -> dict[str, dict[str, object]]:
        """Static device facts for the trace header (what a replay needs for trip lines)."""
        return {
            d.name: {
                "trip_temps_c": [t.temp_c for t in d.profile.thermal.trips]
                if d.profile.thermal_network is None else d.profile.thermal_network.trip_temps_c(),
                "ambient_c": d.profile.thermal.ambient_c
                if d.profile.thermal_network is None else d.profile.thermal_network.ambient_c,
                "clock_levels": len(d.levels) if d.net is None
                else d.net.clocks[d.llm_unit].max_level + 1,
                "battery_capacity_wh": d.battery_capacity_wh,
            }
            for d in self.devices
        }

    def device_states(self) -> list[DeviceSample]:
        """Every device's state now (temperature, clock level, battery, queue, offload share)."""
        return [d.sample() for d in self.devices]

    def recent_records(self, n: int = 100) -> list[RequestRecord]:
        return list(self.recent)[-n:]

    def summary(self) -> Summary:
        """Statistics so far (final after :meth:`run` / :meth:`close`)."""
        return summarize(self)

    @property
    def mean_in_system(self) -> float:
        """Time-average number of requests in the system so far (L in Little's law)."""
        self._account(self.loop.now)
        return self._area / self._area_t if self._area_t > 0 else 0.0

    def close(self) -> Summary:
        """Flush and close the trace; returns the final summary. Idempotent."""
        if not self._closed:
            self._closed = True
            for d in self.devices:
                d.stop_governors()
            for d in self.devices:
                self._take_migrations(d)
            if self.writer is not None:
                self._buf.extend(self.device_states())
                self.writer.write_many(self._buf)
                self._buf.clear()
                self.writer.close()
        return self.summary()

    # ---- arrivals ------------------------------------------------------------------------
    def _queue_next(self, src: _Source, nxt: Arrival | None = None) -> None:
        """Schedule the source's next arrival (``nxt``, or drawn now), or close the source."""
        if nxt is None:
            nxt = next(src.it, None)
        if nxt is None or nxt[0] > self.duration_s:
            if src.next is not None:
                self._open_sources -= 1
            src.next = None
            return
        if src.next is None:
            self._open_sources += 1
        src.next = nxt
        self.loop.at(nxt[0], self._arrival_cb, src)

    def _account(self, now: float) -> None:
        self._area += self.in_system * (now - self._area_t)
        self._area_t = now

    def _on_arrival(self, arg: Any) -> None:
        src: _Source = arg
        nxt = src.next
        if nxt is None:
            self.loop.superseded += 1
            return  # the source was closed (request budget reached) after this was scheduled
        # the arrival's fields stay the objects they are: unpacked into typed locals, compiled
        # code would unbox the ints and box them again (allocating) for the record
        t, w, h, b, text, out, deadline, prefix = cast(
            "tuple[float, Any, Any, Any, Any, Any, Any, Any]", nxt)
        dev = src.device
        self.arrived = arrived = self.arrived + 1
        n = src.n = src.n + 1
        in_system = self.in_system
        self._area += in_system * (t - self._area_t)
        self._area_t = t
        self.in_system = in_system + 1
        geo = src.cache.get((w, h))
        th, tw, itok, dec = cast("tuple[Any, Any, Any, Any]",
                                 geo if geo is not None else src.geom.target(w, h))
        prompt = text + itok
        rec = RequestRecord(
            id=f"{dev.name}-{n}", device=dev.name, arrived_s=t, image_bytes=b,
            num_images=1 if w else 0, source_width=w, source_height=h, target_width=tw,
            target_height=th, image_tokens=itok, prompt_tokens=prompt, output_tokens=out,
            max_tokens=out, deadline_s=deadline)
        job = Job(rec, dev, w * h, tw * th, itok, prompt, out, 0, dec)
        if prefix is not None:
            job.prefix_id = rec.prefix_id = prefix[0]
            job.prefix_tokens = rec.prefix_tokens = prefix[1]
        # the next arrival is drawn before the decision, so policies cannot shift arrivals
        if arrived >= self.max_requests:
            self._stop_sources()
        else:
            self._queue_next(src, next(src.it, None))
        if dev.battery_capacity_wh is not None and dev.battery_wh == 0.0:
            rec.outcome = Outcome.FAILED
            rec.error = "battery depleted"
            rec.placement = "none"
            self._finished(job)
            return
        d = self.policy.decide(job, dev)
        rec.decision_reason = d.reason
        if dev.observed is not None or dev.observed_link is not None:
            self._decision_seen(job, dev)
        if d.resolution_scale != 1.0:
            self._downgrade(job, src.geom, d.resolution_scale, text)
        dev.decisions += 1
        placement = d.placement
        if placement is self._local:
            if d.model is None:
                rec.placement = "local"
            else:
                engine = dev.variants.get(d.model)
                if engine is None:
                    raise ConfigError(f"policy {self.policy.name}: device {dev.name} has no model "
                                      f"{d.model!r} (llm_variants: {', '.join(dev.variants) or 'none'})")
                job.engine = engine
                rec.placement = f"local:{d.model}"
            dev.admit(job)
        elif placement is self._cloud and dev.cloud is not None:
            rec.placement = dev.cloud.placement
            dev.offloaded += 1
            dev.offload(job)
        else:
            rec.placement = "drop"
            rec.outcome = Outcome.DROPPED
            rec.error = d.reason
            self._finished(job)

    @staticmethod
    def _decision_seen(job: Job, dev: Device) -> None:
        """What the decision saw, in the record as the gateway writes it: the device's queue (the
        queue the request is dispatched behind) and both predictions."""
        rec = job.rec
        rec.decision_queue = dev.queue_len
        local, cloud = dev.estimate_local_s(job), dev.estimate_cloud_s(job)
        rec.predicted_local_s = local if local != math.inf else None
        rec.predicted_cloud_s = cloud if cloud != math.inf else None
        link = dev.observed_link
        if link is not None:
            rec.link_rtt_s = link.rtt_s.value
            rec.link_uplink_mbps = link.uplink_bps.value / 1e6

    @staticmethod
    def _observe(obs: ObservedEstimate, job: Job) -> None:
        """A request that finished on the device's main model, observed as the gateway observes a
        finished local call: its latency from dispatch (here its arrival, where it was decided)
        and the queue its dispatch saw. One that failed, was refused or ran on a smaller model
        (whose idle prediction is not the main model's) is not observed."""
        rec = job.rec
        end = rec.finished_s
        if rec.placement == "local" and rec.outcome is Outcome.OK and end is not None:
            obs.observe(job, end - rec.arrived_s, rec.decision_queue or 0)

    @staticmethod
    def _link_estimate(prior: CloudEstimatePrior, dev: Device) -> LinkEstimate:
        """The gateway's cloud estimate for ``dev``, from ``prior`` (its figures left out: the
        gateway's), with the probe the gateway sends its cloud as it starts."""
        est = LinkEstimate.starting_at(
            RTT_PRIOR_S if prior.rtt_s is None else prior.rtt_s,
            UPLINK_PRIOR_BPS if prior.uplink_mbps is None else prior.uplink_mbps * 1e6,
            SERVICE_PRIOR_S if prior.service_s is None else prior.service_s)
        est.observe_rtt(dev.link.est_fixed_s)
        return est

    @staticmethod
    def _observe_call(est: LinkEstimate, dev: Device, job: Job) -> None:
        """A request that finished in the cloud, observed as the gateway observes a finished
        cloud call, with the probes of the round trip that go on between calls.

        * round trip: a probe's, the link's expected round trip of a small message
          (:attr:`sim.core.network.Link.est_fixed_s`: the RTT, both ways' mean jitter and the
          expected waits for retransmissions);
        * body bytes: what went up, the (possibly downscaled) image and the request overhead;
        * time to the response headers: the gateway streams, and a streaming ``edgeserve serve``
          sends its headers with the first token, so this is the simulated first token at the
          cloud (after the upload, the cloud's preprocessing, queue and prefill) plus the expected
          one-way time of the small message that carries it back;
        * total time: from dispatch (the arrival, where it was decided) until the answer came down.

        One that failed or was refused is not observed, as the gateway observes no failed call."""
        rec = job.rec
        end, first = rec.finished_s, rec.first_token_s
        if rec.uplink_end_s is None or rec.outcome is not Outcome.OK or end is None \
                or first is None:
            return
        probe = dev.link.est_fixed_s
        est.observe_rtt(probe)
        est.observe_call(rec.image_bytes + dev.link_cfg.request_overhead_bytes,
                         first - rec.arrived_s + probe / 2, end - rec.arrived_s)

    def _stop_sources(self) -> None:
        for s in self._sources:
            s.next = None
        self._open_sources = 0

    @staticmethod
    def _downgrade(job: Job, geom: ImageGeometry, scale: float, text: int) -> None:
        rec = job.rec
        w = max(1, int(rec.source_width * scale))
        h = max(1, int(rec.source_height * scale))
        th, tw, itok, dec = geom.target(w, h)
        rec.source_width, rec.source_height = w, h
        rec.image_bytes = int(rec.image_bytes * scale * scale)
        rec.target_width, rec.target_height, rec.image_tokens = tw, th, itok
        rec.prompt_tokens = text + itok
        job.source_pixels, job.target_pixels, job.decoded_pixels = w * h, tw * th, dec
        job.image_tokens, job.prompt_tokens = itok, text + itok

    # ---- departures and samples -----------------------------------------------------------
    def _cloud_done(self, job: Job) -> None:
        job.device.cloud_done(job)

    def _finished(self, job: Job) -> None:
        now = self.loop.now
        self._area += self.in_system * (now - self._area_t)
        self._area_t = now
        self.in_system = in_system = self.in_system - 1
        self.completed += 1
        rec = job.rec
        if in_system == 0 and self._open_sources == 0:
            self.loop.stop()  # the last request left: the run ends here (not after cool-down)
        dev: Device = job.device
        if dev.observed is not None:
            self._observe(dev.observed, job)
        if dev.observed_link is not None:
            self._observe_call(dev.observed_link, dev, job)
        pending = self._pending
        pending.append(rec)  # stats and recent take records in batches (see _fold)
        if len(pending) >= _BATCH:
            self._fold()
        for sink in self._record_sinks:
            sink(rec)
        if self.writer is not None:
            buf = self._buf
            buf.append(rec)
            if len(buf) >= _BATCH:
                self.writer.write_many(buf)
                buf.clear()

    def _on_sample(self, arg: Any) -> None:
        for d in self.devices:
            self._take_migrations(d)
            s = d.sample()
            self._stats.on_sample(s, d.decisions, d.offloaded)
            for sink in self._sample_sinks:
                sink(s)
            if self.writer is not None:
                self._buf.append(s)
        if not self.finished:
            self.loop.after(self.scenario.sample_interval_s, self._on_sample)
        else:
            for d in self.devices:
                d.stop_governors()
