"""Streaming statistics: summaries of a million requests without keeping a million records.

Latencies go into :class:`Histogram`, a fixed array of logarithmic buckets (1 % wide, from
100 µs to 10⁵ s): adding is O(1), quantiles are accurate to half a bucket (±0.5 %), means are
exact (the sum is kept), and histograms of devices merge into the fleet's by adding counts.
Device samples go into :class:`Series`, which keeps at most ``max_points`` by averaging neighbours
when full, for plots of long runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edgeserve.records import DeviceSample, Outcome, RequestRecord

_LO_S = 1e-4
_RATIO = 1.01
_LOG_RATIO = math.log(_RATIO)
_NBUCKETS = int(math.log(1e5 / _LO_S) / _LOG_RATIO) + 2


class Histogram:
    """Log-bucketed histogram of positive durations in seconds."""

    __slots__ = ("count", "counts", "max", "sum")

    def __init__(self) -> None:
        self.counts = [0] * _NBUCKETS
        self.count = 0
        self.sum = 0.0
        self.max = 0.0

    def add(self, x: float) -> int:
        """Count ``x``; returns its bucket (to add the same value elsewhere with :meth:`add_at`)."""
        self.count += 1
        self.sum += x
        if x > self.max:
            self.max = x
        i = int(math.log(x / _LO_S) / _LOG_RATIO) + 1 if x > _LO_S else 0
        if i >= _NBUCKETS:
            i = _NBUCKETS - 1
        self.counts[i] += 1
        return i

    def add_at(self, i: int, x: float) -> None:
        self.count += 1
        self.sum += x
        if x > self.max:
            self.max = x
        self.counts[i] += 1

    def merge(self, other: Histogram) -> None:
        self.count += other.count
        self.sum += other.sum
        self.max = max(self.max, other.max)
        c = self.counts
        for i, n in enumerate(other.counts):
            if n:
                c[i] += n

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0..1), at the geometric middle of its bucket."""
        if not self.count:
            return math.nan
        rank = q * self.count
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if n and seen >= rank:
                if i == 0:
                    return _LO_S
                return min(self.max, _LO_S * _RATIO ** (i - 0.5))
        return self.max

    def cdf_points(self) -> tuple[list[float], list[float]]:
        """(latency_s, cumulative fraction) at bucket upper edges, for CDF plots."""
        xs, ys = [], []
        seen = 0
        for i, n in enumerate(self.counts):
            if n:
                seen += n
                xs.append(_LO_S * _RATIO**i)
                ys.append(seen / self.count)
        return xs, ys


class Series:
    """A bounded time series: keeps ≤ ``max_points`` by halving resolution when full."""

    __slots__ = ("_acc", "_acc_n", "max_points", "stride", "t", "v")

    def __init__(self, max_points: int = 4000) -> None:
        self.max_points = max_points
        self.stride = 1
        self.t: list[float] = []
        self.v: list[float] = []
        self._acc = 0.0
        self._acc_n = 0

    def add(self, t: float, v: float) -> None:
        n = self._acc_n + 1
        if n < self.stride:
            self._acc += v
            self._acc_n = n
            return
        ts = self.t
        ts.append(t)
        self.v.append((self._acc + v) / n)
        self._acc = 0.0
        self._acc_n = 0
        if len(ts) >= self.max_points:
            self._halve()

    def _halve(self) -> None:
        """Halve the resolution (what :meth:`add` does when ``max_points`` are reached)."""
        self.t = self.t[1::2]
        self.v = [(a + b) / 2 for a, b in zip(self.v[::2], self.v[1::2], strict=False)]
        self.stride *= 2


@dataclass(slots=True)
class DeviceStats:
    """Counters of one device (or of the fleet)."""

    requests: int = 0
    ok: int = 0
    failed: int = 0
    dropped: int = 0
    rejected: int = 0  # refused at admission (the runtime's 429s)
    offloaded: int = 0
    slo_met: int = 0
    e2e: Histogram = field(default_factory=Histogram)
    ttft: Histogram = field(default_factory=Histogram)
    e2e_local: Histogram = field(default_factory=Histogram)
    e2e_cloud: Histogram = field(default_factory=Histogram)
    last_finish_s: float = 0.0

    def merge(self, o: DeviceStats) -> None:
        self.requests += o.requests
        self.ok += o.ok
        self.failed += o.failed
        self.dropped += o.dropped
        self.rejected += o.rejected
        self.offloaded += o.offloaded
        self.slo_met += o.slo_met
        self.e2e.merge(o.e2e)
        self.ttft.merge(o.ttft)
        self.e2e_local.merge(o.e2e_local)
        self.e2e_cloud.merge(o.e2e_cloud)
        self.last_finish_s = max(self.last_finish_s, o.last_finish_s)


@dataclass(slots=True)
class Timeline:
    """Per-device series for plots: temperature, clock level, power, offload share per interval."""

    temp_c: Series = field(default_factory=Series)
    clock_level: Series = field(default_factory=Series)
    power_w: Series = field(default_factory=Series)
    offload_share: Series = field(default_factory=Series)
    decisions: Series = field(default_factory=Series)  # per sample interval
    offloads: Series = field(default_factory=Series)  # per sample interval
    battery_wh: Series = field(default_factory=Series)
    max_temp_c: float = -math.inf
    _decisions: int = 0
    _offloaded: int = 0

class _ClassSamples:
    """One sample tick of a device class being summed up (see StatsCollector.on_sample)."""

    __slots__ = ("batteries", "battery", "decisions", "level", "n", "offloaded", "power", "t",
                 "temp")

    def __init__(self, t: float) -> None:
        self.t = t
        self.n = self.batteries = self.decisions = self.offloaded = 0
        self.temp = self.level = self.power = self.battery = 0.0


class StatsCollector:
    """Receives finished records and device samples; keeps only fixed-size summaries.

    Statistics are kept per *key*: the device's own name, or — with ``per_device=False``, for
    fleets — its class (:meth:`register` says which device belongs to which class). A class's
    time series then hold, per sample tick, the mean over its devices of temperature, clock level,
    power and battery, and the summed decisions and offloads; ``max_temp_c`` is the hottest device.
    Memory is then a fixed size per class, not per device.
    """

    def __init__(self, slo_e2e_s: float, slo_ttft_s: float | None,
                 per_device: bool = True) -> None:
        self.slo_e2e_s = slo_e2e_s
        self.slo_ttft_s = slo_ttft_s
        self.per_device = per_device
        self.devices: dict[str, DeviceStats] = {}  # by key (device, or class)
        self.groups: dict[str, str] = {}  # device → its class
        self._route: dict[str, DeviceStats] = {}  # device → the stats its records go to
        self._timelines: dict[str, Timeline] = {}
        self._ticks: dict[str, _ClassSamples] = {}  # class → the tick being summed

    def register(self, device: str, group: str) -> None:
        """Declare ``device`` a member of class ``group`` (before its first record)."""
        self.groups[device] = group
        key = device if self.per_device else group
        st = self.devices.get(key)
        if st is None:
            st = self.devices[key] = DeviceStats()
        self._route[device] = st

    def key(self, device: str) -> str:
        """Where ``device``'s statistics are kept."""
        return device if self.per_device else self.groups.get(device, device)

    @property
    def timelines(self) -> dict[str, Timeline]:
        """Series of the samples so far, per key."""
        for group, tick in self._ticks.items():
            self._close_tick(group, tick)
        return self._timelines

    def _stats_of(self, device: str) -> DeviceStats:
        """An unregistered device: a key of its own."""
        st = self.devices.get(device)
        if st is None:
            st = self.devices[device] = DeviceStats()
        self._route[device] = st
        return st

    def on_record(self, rec: RequestRecord) -> None:
        st = self._route.get(rec.device)  # type: ignore[arg-type]
        if st is None:
            st = self._stats_of(rec.device)  # type: ignore[arg-type]
        st.requests += 1
        out = rec.outcome
        cloud = rec.uplink_end_s is not None
        if cloud:
            st.offloaded += 1
        if out is Outcome.OK:
            st.ok += 1
            fin = rec.finished_s
            e2e = fin - rec.arrived_s  # type: ignore[operator]
            (st.e2e_cloud if cloud else st.e2e_local).add_at(st.e2e.add(e2e), e2e)
            ttft = rec.first_token_s - rec.arrived_s  # type: ignore[operator]
            st.ttft.add(ttft)
            if fin > st.last_finish_s:  # type: ignore[operator]
                st.last_finish_s = fin  # type: ignore[assignment]
            if e2e <= self.slo_e2e_s and (self.slo_ttft_s is None or ttft <= self.slo_ttft_s) \
                    and (rec.deadline_s is None or fin <= rec.deadline_s):  # type: ignore[operator]
                st.slo_met += 1
        elif out is Outcome.DROPPED:
            st.dropped += 1
        elif out is Outcome.REJECTED:
            st.rejected += 1
        else:
            st.failed += 1

    def on_records(self, recs: list[RequestRecord]) -> None:
        """Fold many records in at once; the same as :meth:`on_record` on each, in order
        (a copy of it that pays on the event path: tests/sim/test_fast_paths.py)."""
        route = self._route
        slo_e2e, slo_ttft = self.slo_e2e_s, self.slo_ttft_s
        ok_, dropped_, rejected_ = Outcome.OK, Outcome.DROPPED, Outcome.REJECTED
        lo, log_ratio, top = _LO_S, _LOG_RATIO, _NBUCKETS - 1  # math.log: a compiled primitive
        for rec in recs:
            st = route.get(rec.device)  # type: ignore[arg-type]
            if st is None:
                st = self._stats_of(rec.device)  # type: ignore[arg-type]
            st.requests += 1
            out = rec.outcome
            cloud = rec.uplink_end_s is not None
            if cloud:
                st.offloaded += 1
            if out is ok_:
                st.ok += 1
                fin: float = rec.finished_s  # type: ignore[assignment]
                arr = rec.arrived_s
                e2e = fin - arr
                # Histogram.add on e2e and on the path's histogram, then ttft: inlined
                i = int(math.log(e2e / lo) / log_ratio) + 1 if e2e > lo else 0
                if i > top:
                    i = top
                st.e2e.add_at(i, e2e)  # (a loop over the two would iterate a tuple generically)
                (st.e2e_cloud if cloud else st.e2e_local).add_at(i, e2e)
                first: float = rec.first_token_s  # type: ignore[assignment]
                ttft = first - arr  # a float: math.log below is a compiled primitive
                h = st.ttft
                h.count += 1
                h.sum += ttft
                if ttft > h.max:
                    h.max = ttft
                i = int(math.log(ttft / lo) / log_ratio) + 1 if ttft > lo else 0
                h.counts[i if i < top else top] += 1
                if fin > st.last_finish_s:
                    st.last_finish_s = fin
                if e2e <= slo_e2e and (slo_ttft is None or ttft <= slo_ttft) \
                        and (rec.deadline_s is None or fin <= rec.deadline_s):
                    st.slo_met += 1
            elif out is dropped_:
                st.dropped += 1
            elif out is rejected_:
                st.rejected += 1
            else:
                st.failed += 1

    def on_sample(self, s: DeviceSample, decisions: int, offloaded: int) -> None:
        if not self.per_device:
            group = self.groups.get(s.device)
            if group is not None:
                self._class_sample(group, s, decisions, offloaded)
                return
        tl = self._timelines.get(s.device)
        if tl is None:
            tl = self._timelines[s.device] = Timeline()
        t = s.t_s
        temp = s.temp_c
        dd = decisions - tl._decisions
        do = offloaded - tl._offloaded
        tl._decisions, tl._offloaded = decisions, offloaded
        # one compiled Series.add per value (batching the samples first cost more than it saved)
        tl.temp_c.add(t, temp)
        tl.clock_level.add(t, s.clock_level)
        tl.power_w.add(t, s.power_w)
        battery = s.battery_wh
        if battery is not None:
            tl.battery_wh.add(t, battery)
        tl.offload_share.add(t, do / dd if dd else 0.0)
        tl.decisions.add(t, dd)
        tl.offloads.add(t, do)
        if temp > tl.max_temp_c:
            tl.max_temp_c = temp

    def _class_sample(self, group: str, s: DeviceSample, decisions: int, offloaded: int) -> None:
        """Add one device's sample to its class's tick (closed when the next tick begins)."""
        tick = self._ticks.get(group)
        if tick is None or tick.t != s.t_s:
            if tick is not None:
                self._close_tick(group, tick)
            tick = self._ticks[group] = _ClassSamples(s.t_s)
        tick.n += 1
        tick.temp += s.temp_c
        tick.level += s.clock_level
        tick.power += s.power_w
        if s.battery_wh is not None:
            tick.batteries += 1
            tick.battery += s.battery_wh
        tick.decisions += decisions
        tick.offloaded += offloaded
        tl = self._timelines.get(group)
        if tl is None:
            tl = self._timelines[group] = Timeline()
        if s.temp_c > tl.max_temp_c:
            tl.max_temp_c = s.temp_c

    def _close_tick(self, group: str, tick: _ClassSamples) -> None:
        n = tick.n
        if n == 0:
            return
        tl = self._timelines[group]
        t = tick.t
        dd = tick.decisions - tl._decisions
        do = tick.offloaded - tl._offloaded
        tl._decisions, tl._offloaded = tick.decisions, tick.offloaded
        tl.temp_c.add(t, tick.temp / n)
        tl.clock_level.add(t, tick.level / n)
        tl.power_w.add(t, tick.power / n)
        if tick.batteries:
            tl.battery_wh.add(t, tick.battery / tick.batteries)
        tl.offload_share.add(t, do / dd if dd else 0.0)
        tl.decisions.add(t, dd)
        tl.offloads.add(t, do)
        tick.n = 0  # closed: a second close is a no-op

    def fleet(self) -> DeviceStats:
        total = DeviceStats()
        for st in self.devices.values():
            total.merge(st)
        return total
