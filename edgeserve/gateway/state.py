"""Everything one running gateway holds: config, targets, the live device, the policy, the trace."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import aiohttp

from edgeserve import records
from edgeserve.gateway.auth import RateLimiter
from edgeserve.gateway.config import GatewayConfig, Place, SensorMode
from edgeserve.gateway.embedder import Embedder
from edgeserve.gateway.live_device import LiveDevice
from edgeserve.gateway.metrics import GatewayMetrics
from edgeserve.gateway.pii import mask_record
from edgeserve.gateway.router import Router
from edgeserve.gateway.semantic_cache import SemanticCache
from edgeserve.gateway.sensors import Sensors
from edgeserve.gateway.targets import Target
from edgeserve.tracing import EventHub
from sim.core.policies import Policy, make_policy
from sim.scenario.config import PolicyConfig

PRODUCER = "edgeserve gateway"  # the trace header's producer


@dataclass
class GatewayState:
    config: GatewayConfig
    targets: list[Target]
    device: LiveDevice
    policy: Policy
    policy_name: str
    limiter: RateLimiter
    metrics: GatewayMetrics
    trace: records.TraceWriter | None
    header: records.TraceHeader
    cache: SemanticCache | None = None
    embedder: Embedder | None = None
    router: Router | None = None
    session: aiohttp.ClientSession | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    seq: int = 0
    hub: EventHub = field(default_factory=EventHub)  # ``GET /v1/events`` subscribers

    @property
    def locals(self) -> list[Target]:
        return [t for t in self.targets if t.place is Place.LOCAL]

    @property
    def clouds(self) -> list[Target]:
        return [t for t in self.targets if t.place is Place.CLOUD]

    def set_policy(self, cfg: PolicyConfig) -> None:
        """Swap the policy; the next request's decision uses it (raises ConfigError)."""
        self.policy = make_policy(cfg)
        self.policy_name = cfg.kind

    def next_id(self) -> str:
        self.seq += 1
        return f"gw-{os.getpid()}-{self.seq}"

    def write(self, rec: records.RequestRecord) -> None:
        masked = mask_record(rec)
        if self.trace is not None:
            self.trace.write(masked)
            self.trace.flush()
        if self.hub.subscribers:
            self.hub.publish(records.encode(masked))


def build_state(cfg: GatewayConfig) -> GatewayState:
    from sim.scenario.config import load_device_profile

    profile = load_device_profile(cfg.profile) if cfg.profile else None
    targets = [Target(t, uplink_bps=cfg.cloud_uplink_mbps * 1e6) for t in cfg.targets]
    sensors = Sensors(profile, cfg.sensor_interval_s, host=cfg.sensors is SensorMode.AUTO)
    device = LiveDevice([t for t in targets if t.place is Place.LOCAL],
                        [t for t in targets if t.place is Place.CLOUD], sensors, profile)
    header = records.TraceHeader(
        producer=PRODUCER, wall_offset_s=time.time() - time.monotonic(),
        meta={"policy": cfg.policy.kind, "policy_params": cfg.policy.params,
              "targets": [{"name": t.name, "place": t.place.value, "url": t.url,
                           "models": t.models} for t in cfg.targets],
              "profile": cfg.profile, "sensors": sensors.describe()})
    trace = records.TraceWriter(cfg.trace, header) if cfg.trace else None
    cache = embedder = router = None
    if cfg.cache_capacity or cfg.routes:
        embedder = Embedder()  # one embedding per request, for the cache and the routes
    if cfg.cache_capacity:
        assert embedder is not None
        cache = SemanticCache(cfg.cache_capacity, embedder.dim, cfg.cache_ttl_s,
                              cfg.cache_threshold)
    if cfg.routes:
        assert embedder is not None
        router = Router(cfg.routes, embedder, cfg.route_threshold)
    return GatewayState(cfg, targets, device, make_policy(cfg.policy), cfg.policy.kind,
                        RateLimiter(cfg.rate_limit_per_s, cfg.rate_burst), GatewayMetrics(), trace,
                        header, cache, embedder, router)
