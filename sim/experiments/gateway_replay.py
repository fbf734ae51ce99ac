"""A gateway trace replayed in the simulator: the same policy on the same traffic.

``edgeserve gateway --trace FILE`` writes one record per request with its arrival time, image
size and bytes, token counts, and the header names the gateway's policy (with its parameters)
and device profile. Replaying it builds a one-device scenario: the trace's device profile, the
trace's policy, a ``replay`` workload of the trace's own records (``trace_device: gateway``), and
the base scenario's link and cloud (``edgeserve sim``'s default, or the one given). The device's
local estimate is the gateway's (``observed_estimate``, :mod:`sim.core.observed_estimate`): the
idle profile's prediction × the moving ratio of observed to predicted service, learnt from the
simulated device's finished local requests, × (1 + queue), so the policy reads the function the
live gateway read (``--set 'devices[0].observed_estimate=false'`` gives it the simulated
device's own queue-aware estimate instead). Its cloud estimate is the gateway's too
(``observed_cloud_estimate``, :mod:`sim.core.link_estimate`): the moving round trip + the upload
at the moving upload rate + the moving service time, learnt from the simulated device's finished
cloud calls as the gateway learns them from its live ones, from the gateway's starting figures
(``--set 'devices[0].observed_cloud_estimate=false'`` gives it the simulated link's and cloud's
model estimate instead). Where the records carry the link the gateway measured (``link_rtt_s``,
``link_uplink_mbps``), the device's link is that one instead (:func:`measured_link`), and the
cloud estimate starts where the gateway's stood at the first replayed decision
(:func:`estimate_prior`). With ``cloud_profile``, a calibrated server
profile (``edgeserve calibrate``) of the server that stood for the cloud, the cloud is that server
(:func:`cloud_from_server`): its engine step model and its preprocessing per megapixel. The live
trace's figures and the simulation's are then computed by one function, :func:`figures`, so the
two columns differ by what the simulator models, not by how they were counted.

Requests the gateway answered from its semantic cache never reached a policy: they are left out
of both sides.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeserve.records import Outcome, RequestRecord, TraceHeader, read_trace
from sim.core.link_estimate import REQUEST_OVERHEAD_BYTES
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


def trace_from(trace: str | Path, first_s: float, out: str | Path) -> Path:
    """A copy of a gateway trace without the requests that arrived before ``first_s`` (on the
    trace's clock): a warm-up, sent to teach the gateway its targets' service times, is then
    neither live nor simulated."""
    from edgeserve.records import TraceWriter

    header, recs = read_gateway_trace(trace)
    kept = [r for r in recs if r.arrived_s >= first_s]
    if not kept:
        raise ConfigError(f"{trace}: no request arrived after {first_s:.3f} s")
    w = TraceWriter(str(out), header)
    for r in kept:
        w.write(r)
    w.close()
    return Path(out)


def measured_link(records: list[RequestRecord]) -> dict[str, Any] | None:
    """The link the gateway measured to its cloud, as a scenario ``link``: the median over the
    records of the round trip and upload rate its decisions saw, the download at the upload's
    rate, no jitter and no loss beyond what the round trip holds. None where no record carries
    one (a gateway without a cloud, or a trace from before the gateway recorded it)."""
    rtts = [r.link_rtt_s for r in records if r.link_rtt_s is not None]
    ups = [r.link_uplink_mbps for r in records if r.link_uplink_mbps is not None]
    if not rtts or not ups:
        return None
    up = statistics.median(ups)
    return {"rtt_ms": statistics.median(rtts) * 1000.0, "uplink_mbps": up, "downlink_mbps": up,
            "jitter_ms": 0.0, "loss": 0.0}


def estimate_prior(records: list[RequestRecord]) -> dict[str, float] | None:
    """Where the gateway's cloud estimate stood at the first decision that recorded it, as a
    device entry's ``cloud_estimate_prior``: its round trip and upload rate, and — where the
    record carries the decision's cloud prediction (``predicted_cloud_s``) — its service time,
    the prediction less the round trip and the request's upload at that rate
    (:class:`sim.core.link_estimate.LinkEstimate`). A trace cut after a warm-up
    (:func:`trace_from`) so starts the replay's estimate where the warm-up left the gateway's.
    None where no record carries the link."""
    for r in records:
        rtt, up = r.link_rtt_s, r.link_uplink_mbps
        if rtt is None or up is None:
            continue
        prior = {"rtt_s": rtt, "uplink_mbps": up}
        if r.predicted_cloud_s is not None and up > 0:
            upload = (r.image_bytes + REQUEST_OVERHEAD_BYTES) * 8.0 / (up * 1e6)
            prior["service_s"] = max(0.0, r.predicted_cloud_s - rtt - upload)
        return prior
    return None


TOKEN_PIXELS = 28 * 28  # source pixels per image token of the Qwen2-VL family's patch merger


def _preprocess_s(server: dict[str, Any], rec: RequestRecord, max_target_px: float) -> float:
    """The server's fitted worker stages (decode, resize, normalize and an encoder that ran in
    the worker) summed for one request's image; decoded pixels are the source's (no JPEG
    downscale), target pixels the source's up to the largest target the calibration saw."""
    px = float(rec.source_width * rec.source_height)
    target = min(px, max_target_px)
    tokens = target / TOKEN_PIXELS
    feats = {"source_pixels": px, "decoded_pixels": px, "target_pixels": target,
             "image_tokens": tokens, "image_tokens_sq": tokens * tokens}
    stages = server.get("stages") or {}
    cpu = (stages.get("image_decode") or {}).get("unit", "cpu")
    total = 0.0
    for name, stage in stages.items():
        if name in ("prefill", "decode_step") or stage.get("unit") != cpu:
            continue  # the engine's, or an encoder on its own unit (its time is in the steps)
        model = stage.get("model") or {}
        total += float(model.get("base_s", 0.0)) + sum(
            float(c) * feats.get(f, 0.0) for f, c in (model.get("per") or {}).items())
    return total


def cloud_from_server(server: dict[str, Any], base_cloud: dict[str, Any],
                      records: list[RequestRecord]) -> dict[str, Any]:
    """A cloud profile (raw) for a server that was calibrated as a device profile.

    The cloud's replicas become step engines with the server's fitted step model
    (``llm.step``). Its image work, which the simulated cloud prices per source megapixel (a
    delay, no worker queue), is the server's fitted worker stages (:func:`_preprocess_s`) on the
    traced requests' images, fitted through the origin on their megapixels. The GPU and model
    shape (KV capacity from memory) come from ``base_cloud``."""
    step = (server.get("llm") or {}).get("step")
    if not isinstance(step, dict):
        raise ConfigError(f"profile {server.get('name')!r}: no engine step model (llm.step) to "
                          "serve as the cloud's; calibrate it from a trace with engine steps")
    top = ((server.get("fitted_range") or {}).get("target_pixels") or [None, None])[1]
    max_target = float(top) if top else math.inf
    sized = [r for r in records if r.source_width and r.source_height]
    mps = [r.source_width * r.source_height / 1e6 for r in sized]
    pre = [_preprocess_s(server, r, max_target) for r in sized]
    per_mp = (sum(m * p for m, p in zip(mps, pre, strict=True)) / sum(m * m for m in mps)
              if sized else 0.0)
    srv = dict(base_cloud.get("server") or {})
    srv.update(step=dict(step), preprocess_s_per_mpixel=per_mp,
               max_batch=int(step.get("max_num_seqs") or srv.get("max_batch") or 16))
    return {**base_cloud, "name": f"{server.get('name', 'server')} as the cloud", "server": srv,
            "description": f"the calibrated server {server.get('name')!r} standing for the cloud"}


def replay_scenario(trace: str | Path, header: TraceHeader, records: list[RequestRecord],
                    base_raw: dict[str, Any]) -> dict[str, Any]:
    """A raw scenario (profiles by name) that replays ``trace`` under its own policy."""
    meta = header.meta
    base_dev = (base_raw.get("devices") or [{}])[0]
    device: dict[str, Any] = {
        "name": GATEWAY_DEVICE, "profile": meta.get("profile") or DEFAULT_PROFILE,
        "workload": {"kind": "replay", "trace": str(Path(trace).resolve()),
                     "trace_device": GATEWAY_DEVICE},
        "observed_estimate": True, "observed_cloud_estimate": True}
    link = measured_link(records)
    if link is not None:
        device["link"] = link
    prior = estimate_prior(records)
    if prior is not None:
        device["cloud_estimate_prior"] = prior
    elif "link" in base_dev:
        device["link"] = base_dev["link"]
    requests = len(records)
    params = meta.get("policy_params")
    raw = {k: v for k, v in base_raw.items() if k not in ("devices", "duration_s", "requests")}
    raw.update(name=f"replay of {Path(trace).name}", devices=[device], requests=requests,
               duration_s=None, policy={"kind": str(meta.get("policy") or "always_local"),
                                        "params": dict(params) if isinstance(params, dict) else {}})
    return raw


def replay(trace: str | Path, base_scenario: str | None = None,
           overrides: list[tuple[str, Any]] | None = None, seed: int | None = None,
           cloud_profile: str | Path | None = None) -> tuple[str, Figures, Figures]:
    """Simulate the trace's traffic under its policy: (policy, live figures, simulated).
    ``cloud_profile``: a calibrated server profile that stands for the base scenario's (first)
    cloud (:func:`cloud_from_server`)."""
    from sim.experiments.runner import RunSpec, run_spec
    from sim.scenario.config import inline_profiles, load_yaml, resolve_profile_path, scenario_path

    header, live = read_gateway_trace(trace)
    base_path = scenario_path(base_scenario)
    raw = replay_scenario(trace, header, live, load_yaml(base_path))
    raw = inline_profiles(raw, base_path.parent)
    if cloud_profile is not None:
        clouds = raw.get("cloud") or []
        if not clouds:
            raise ConfigError(f"{base_path}: no cloud for the calibrated server to stand for")
        path = resolve_profile_path(str(cloud_profile), None)
        if not path.exists():
            raise ConfigError(f"cloud profile {str(cloud_profile)!r}: no such file ({path})")
        clouds[0] = {**clouds[0], "profile": cloud_from_server(load_yaml(path),
                                                               clouds[0]["profile"], live)}
        raw["cloud"] = clouds[:1]
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
