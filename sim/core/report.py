"""Summaries of a run — per device and for the fleet — and text tables of them.

What a summary reports, per device and for the whole fleet:

- latency: end-to-end (arrival → answer on the device) mean and p50/p90/p99, TTFT p50/p99;
- outcomes: finished (ok), dropped by the policy, rejected at admission (the runtime's 429s),
  failed;
- SLO attainment: the share of *all* requests (dropped, rejected and failed count as misses)
  that finished within ``slo.e2e_s`` (and ``slo.ttft_s``, and the request's own deadline where
  it has one);
- throughput: finished requests per simulated second;
- energy per request: device energy (compute + radio) over finished requests, joules;
- time throttled: the share of time spent below the top clock level;
- offload share, battery left, peak temperature;

and per cloud server (:class:`CloudSummary`): its layout (replicas × TP), the KV tokens of a
replica, the requests it served and, with prefix caching, its prefix-cache lookups, hits, hit
rate, tokens not recomputed and evictions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sim.core.stats import DeviceStats, StatsCollector

if TYPE_CHECKING:
    from sim.core.cloud import CloudServer
    from sim.core.device import Device
    from sim.core.loop import EventLoop
    from sim.core.policies import Policy
    from sim.scenario.config import Scenario


class Run(Protocol):
    """What a summary is made of: a run's clock, statistics, devices and cloud servers (a
    :class:`~sim.core.simulation.Simulation`)."""

    @property
    def loop(self) -> EventLoop: ...
    @property
    def stats(self) -> StatsCollector: ...
    @property
    def devices(self) -> list[Device]: ...
    @property
    def clouds(self) -> dict[str, CloudServer]: ...
    @property
    def scenario(self) -> Scenario: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def seed(self) -> int: ...
    @property
    def mean_in_system(self) -> float: ...


@dataclass(slots=True)
class DeviceSummary:
    name: str
    requests: int
    ok: int
    failed: int
    dropped: int
    rejected: int
    offload_share: float
    e2e_mean_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    slo_attainment: float
    throughput_rps: float
    energy_j: float
    energy_per_request_j: float
    throttled_share: float
    peak_temp_c: float
    battery_left_wh: float | None
    device_count: int = 1  # devices this row sums up (a class, the fleet)


@dataclass(slots=True)
class CloudSummary:
    """One cloud server: its layout and, with prefix caching, what its caches saved."""

    name: str
    replicas: int
    tp_size: int
    kv_tokens_per_replica: int
    prefix_caching: bool = False
    prefix_lookups: int = 0
    prefix_hits: int = 0
    prefix_hit_rate: float = 0.0  # hits / lookups (0 without lookups)
    prefix_hit_tokens: int = 0  # prompt tokens read from the caches instead of computed
    prefix_evictions: int = 0


def cloud_summary(server: CloudServer) -> CloudSummary:
    caches = server.prefix_caches
    hits = sum(c.hits for c in caches)
    lookups = hits + sum(c.misses for c in caches)
    return CloudSummary(
        name=server.name, replicas=len(server.replicas), tp_size=server.deployment.tp_size,
        kv_tokens_per_replica=server.kv_capacity_tokens, prefix_caching=bool(caches),
        prefix_lookups=lookups, prefix_hits=hits,
        prefix_hit_rate=hits / lookups if lookups else 0.0,
        prefix_hit_tokens=sum(c.hit_tokens for c in caches),
        prefix_evictions=sum(c.evictions for c in caches))


@dataclass(slots=True)
class Summary:
    scenario: str
    policy: str
    seed: int
    sim_time_s: float
    devices: list[DeviceSummary]
    fleet: DeviceSummary
    mean_in_system: float
    events: int
    extra: dict[str, Any] = field(default_factory=dict)
    classes: list[DeviceSummary] = field(default_factory=list)  # one row per device entry
    clouds: list[CloudSummary] = field(default_factory=list)  # one row per cloud server

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(name: str, st: DeviceStats, sim_time_s: float, energy_j: float, throttled_s: float,
         offload_decisions: tuple[int, int], peak_c: float,
         battery_wh: float | None, device_count: int = 1) -> DeviceSummary:
    e, t = st.e2e, st.ttft
    decisions, offloaded = offload_decisions
    return DeviceSummary(
        name=name, requests=st.requests, ok=st.ok, failed=st.failed, dropped=st.dropped,
        rejected=st.rejected,
        offload_share=offloaded / decisions if decisions else 0.0,
        e2e_mean_s=e.mean, e2e_p50_s=e.quantile(0.5), e2e_p90_s=e.quantile(0.9),
        e2e_p99_s=e.quantile(0.99), ttft_p50_s=t.quantile(0.5), ttft_p99_s=t.quantile(0.99),
        slo_attainment=st.slo_met / st.requests if st.requests else math.nan,
        throughput_rps=st.ok / sim_time_s if sim_time_s > 0 else math.nan,
        energy_j=energy_j, energy_per_request_j=energy_j / st.ok if st.ok else math.nan,
        throttled_share=throttled_s / sim_time_s if sim_time_s > 0 else 0.0,
        peak_temp_c=peak_c, battery_left_wh=battery_wh, device_count=device_count)


class _ClassTotals:
    """What a class row sums over its devices (throttled time is averaged at the end)."""

    __slots__ = ("battery", "decisions", "energy", "n", "offloaded", "peak", "stats", "throttled")

    def __init__(self) -> None:
        self.stats = DeviceStats()
        self.n = self.decisions = self.offloaded = 0
        self.energy = self.throttled = 0.0
        self.peak = -math.inf
        self.battery: float | None = None


def summarize(sim: Run) -> Summary:
    """Rows per device (when the stats are kept per device), per class and for the fleet.

    A class row (a scenario's device entry) sums its devices: counts, energy, decisions and
    battery add up, latency histograms merge, throttled share is the devices' mean, peak
    temperature their maximum. The fleet row does the same over every device.
    """
    now = sim.loop.now
    stats = sim.stats
    per_device = stats.per_device
    rows = []
    fleet = DeviceStats()
    classes: dict[str, _ClassTotals] = {}
    tot_e = tot_thr = 0.0
    tot_dec = tot_off = 0
    peak = -math.inf
    bat: float | None = None
    for d in sim.devices:
        group = stats.groups.get(d.name, d.name)
        ct = classes.get(group)
        if ct is None:
            ct = classes[group] = _ClassTotals()
        d.account_until(now)
        energy = d.energy_j + d.radio_j
        tl = stats.timelines.get(d.name if per_device else group)
        pk = max(tl.max_temp_c if tl else -math.inf, d.heat.junction_c())
        bw = d.battery_wh
        if per_device:
            st = stats.devices.get(d.name, DeviceStats())
            fleet.merge(st)
            ct.stats.merge(st)
            rows.append(_row(d.name, st, now, energy, d.throttled_s, (d.decisions, d.offloaded),
                             pk, bw))
        ct.n += 1
        ct.energy += energy
        ct.throttled += d.throttled_s
        ct.decisions += d.decisions
        ct.offloaded += d.offloaded
        ct.peak = max(ct.peak, pk)
        if bw is not None:
            ct.battery = (ct.battery or 0.0) + bw
        tot_e += energy
        tot_thr += d.throttled_s
        tot_dec += d.decisions
        tot_off += d.offloaded
        peak = max(peak, pk)
        if bw is not None:
            bat = (bat or 0.0) + bw
    class_rows = []
    for group, ct in classes.items():
        st = ct.stats if per_device else stats.devices.get(group, DeviceStats())
        if not per_device:
            fleet.merge(st)
        class_rows.append(_row(group, st, now, ct.energy, ct.throttled / ct.n,
                               (ct.decisions, ct.offloaded), ct.peak, ct.battery, ct.n))
    n = max(1, len(sim.devices))
    fleet_row = _row("fleet", fleet, now, tot_e, tot_thr / n, (tot_dec, tot_off), peak, bat,
                     len(sim.devices))
    return Summary(scenario=sim.scenario.name, policy=sim.policy.name, seed=sim.seed,
                   sim_time_s=now, devices=rows, fleet=fleet_row,
                   mean_in_system=sim.mean_in_system, events=sim.loop.events,
                   classes=class_rows, clouds=[cloud_summary(c) for c in sim.clouds.values()])


def _fmt(x: float | None, unit: str = "", digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if unit == "%":
        return f"{100 * x:.1f}%"
    if unit == "ms":
        return f"{1000 * x:.0f}" if x >= 0.1 else f"{1000 * x:.1f}"
    return f"{x:.{digits}g}"


COLUMNS: list[tuple[str, str, str]] = [
    ("requests", "requests", ""), ("ok", "ok", ""), ("dropped", "drop", ""),
    ("rejected", "rej", ""), ("failed", "fail", ""),
    ("e2e_p50_s", "p50 ms", "ms"), ("e2e_p90_s", "p90 ms", "ms"), ("e2e_p99_s", "p99 ms", "ms"),
    ("ttft_p50_s", "ttft50 ms", "ms"), ("slo_attainment", "SLO", "%"),
    ("throughput_rps", "req/s", ""), ("energy_per_request_j", "J/req", ""),
    ("throttled_share", "throttled", "%"), ("offload_share", "offload", "%"),
    ("peak_temp_c", "peak °C", ""), ("battery_left_wh", "battery Wh", ""),
]


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def format_summary(s: Summary) -> str:
    header = ["device"] + [c[1] for c in COLUMNS]
    rows = []
    shown = [*s.devices, *(c for c in s.classes if c.device_count > 1 or not s.devices)]
    if s.fleet.device_count > 1 and len(shown) != 1:
        shown.append(s.fleet)
    for d in shown:
        name = d.name if d.device_count == 1 or d.name == "fleet" else f"{d.name} ×{d.device_count}"
        rows.append([name] + [
            str(getattr(d, k)) if u == "" and isinstance(getattr(d, k), int) else _fmt(getattr(d, k), u)
            for k, _, u in COLUMNS])
    title = (f"scenario {s.scenario}, policy {s.policy}, seed {s.seed}: "
             f"{s.sim_time_s:.1f} s simulated, {s.events} events")
    return "\n".join([title, table(rows, header), *(format_cloud(c) for c in s.clouds)])


def format_cloud(c: CloudSummary) -> str:
    """``cloud h100: 2 replicas × TP2, 1,234,567 KV tokens/replica, prefix cache 812/1000 hits
    (81.2%), 324,800 tokens not recomputed, 3 evictions``."""
    line = (f"cloud {c.name}: {c.replicas} replica{'s' if c.replicas != 1 else ''} × "
            f"TP{c.tp_size}, {c.kv_tokens_per_replica:,} KV tokens/replica")
    if c.prefix_caching:
        line += (f", prefix cache {c.prefix_hits}/{c.prefix_lookups} hits "
                 f"({100 * c.prefix_hit_rate:.1f}%), {c.prefix_hit_tokens:,} tokens not "
                 f"recomputed, {c.prefix_evictions} evictions")
    return line
