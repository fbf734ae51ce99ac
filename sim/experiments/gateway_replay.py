"""A gateway trace replayed in the simulator: the same policy on the same traffic.

``edgeserve gateway --trace FILE`` writes one record per request with its arrival time, image
size and bytes, token counts, and the header names the gateway's policy (with its parameters)
and device profile. Replaying it builds a one-device scenario: the trace's device profile, the
trace's policy, a ``replay`` workload of the trace's own records (``trace_device: gateway``), and
the base scenario's link and cloud (``edgeserve sim``'s default, or the one given). The live
trace's figures and the simulation's are then computed by one function, :func:`figures`, so the
two columns differ by what the simulator models, not by how they were counted.

Requests the gateway answered from its semantic cache never reached a policy: they are left out
of both sides.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeserve.records import Outcome, RequestRecord, TraceHeader, read_trace
from sim.scenario.schema import ConfigError

GATEWAY_PRODUCER = "edgeserve gateway"
GATEWAY_DEVICE = "gateway"  # the ``device`` of a gateway's records
DEFAULT_PROFILE = "jetson-orin-nano"


@dataclass(slots=True, frozen=True)
class Figures:
    requests: int
    offload_share: float
    dropped: int
    ttft_p50_s: float
    ttft_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def figures(records: list[RequestRecord]) -> Figures:
    """Offload share (cloud placements among placed requests) and TTFT/E2E percentiles of the
    requests that finished ``ok``."""
    placed = [r for r in records if r.placement not in (None, "none", "cache")]
    cloud = sum(1 for r in placed if (r.placement or "").startswith("cloud"))
    ok = [r for r in placed if r.outcome is Outcome.OK and r.finished_s is not None]
    ttft = [r.first_token_s - r.arrived_s for r in ok if r.first_token_s is not None]
    e2e = [r.finished_s - r.arrived_s for r in ok]  # type: ignore[operator]
    return Figures(len(placed), cloud / len(placed) if placed else 0.0,
                   sum(1 for r in placed if r.placement == "drop"),
                   _pct(ttft, 50), _pct(ttft, 99), _pct(e2e, 50), _pct(e2e, 99))


def read_gateway_trace(path: str | Path) -> tuple[TraceHeader, list[RequestRecord]]:
    """The header and the policy-decided records of a gateway trace (cache hits left out)."""
    header: TraceHeader | None = None
    recs: list[RequestRecord] = []
    for item in read_trace(path):
        if isinstance(item, TraceHeader):
            header = item
        elif isinstance(item, RequestRecord) and item.placement != "cache":
            recs.append(item)
    if header is None or header.producer != GATEWAY_PRODUCER:
        raise ConfigError(f"{path}: not a trace written by `edgeserve gateway --trace` "
                          f"(its header names {header.producer if header else 'no producer'!r})")
    if not recs:
        raise ConfigError(f"{path}: no requests to replay")
    return header, recs


def replay_scenario(trace: str | Path, header: TraceHeader, requests: int,
                    base_raw: dict[str, Any]) -> dict[str, Any]:
    """A raw scenario (profiles by name) that replays ``trace`` under its own policy."""
    meta = header.meta
    base_dev = (base_raw.get("devices") or [{}])[0]
    device: dict[str, Any] = {
        "name": GATEWAY_DEVICE, "profile": meta.get("profile") or DEFAULT_PROFILE,
        "workload": {"kind": "replay", "trace": str(Path(trace).resolve()),
                     "trace_device": GATEWAY_DEVICE}}
    if "link" in base_dev:
        device["link"] = base_dev["link"]
    params = meta.get("policy_params")
    raw = {k: v for k, v in base_raw.items() if k not in ("devices", "duration_s", "requests")}
    raw.update(name=f"replay of {Path(trace).name}", devices=[device], requests=requests,
               duration_s=None, policy={"kind": str(meta.get("policy") or "always_local"),
                                        "params": dict(params) if isinstance(params, dict) else {}})
    return raw


def replay(trace: str | Path, base_scenario: str | None = None,
           overrides: list[tuple[str, Any]] | None = None, seed: int | None = None
           ) -> tuple[str, Figures, Figures]:
    """Simulate the trace's traffic under its policy: (policy, live figures, simulated)."""
    from sim.experiments.runner import RunSpec, run_spec
    from sim.scenario.config import inline_profiles, load_yaml, scenario_path

    header, live = read_gateway_trace(trace)
    base_path = scenario_path(base_scenario)
    raw = replay_scenario(trace, header, len(live), load_yaml(base_path))
    raw = inline_profiles(raw, base_path.parent)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sim.jsonl"
        run_spec(RunSpec(raw=raw, seed=seed, overrides=overrides or [], trace_path=str(out),
                         series=False))
        simulated = [r for r in read_trace(out) if isinstance(r, RequestRecord)]
    return raw["policy"]["kind"], figures(live), figures(simulated)


def format_replay(policy: str, live: Figures, sim: Figures) -> str:
    def ms(x: float) -> str:
        return "-" if math.isnan(x) else f"{x * 1000:.1f}"

    rows = [("requests", str(live.requests), str(sim.requests)),
            ("offload share", f"{live.offload_share:.1%}", f"{sim.offload_share:.1%}"),
            ("dropped", str(live.dropped), str(sim.dropped)),
            ("TTFT p50 (ms)", ms(live.ttft_p50_s), ms(sim.ttft_p50_s)),
            ("TTFT p99 (ms)", ms(live.ttft_p99_s), ms(sim.ttft_p99_s)),
            ("E2E p50 (ms)", ms(live.e2e_p50_s), ms(sim.e2e_p50_s)),
            ("E2E p99 (ms)", ms(live.e2e_p99_s), ms(sim.e2e_p99_s))]
    lines = [f"policy {policy}: the gateway's trace, live and simulated",
             f"{'':16}{'live':>12}{'simulated':>12}"]
    lines += [f"{a:16}{b:>12}{c:>12}" for a, b, c in rows]
    return "\n".join(lines)
