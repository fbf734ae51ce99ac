"""What ``edgeserve gateway`` is told: its targets, its policy and its limits.

A *target* is a place a request can run: a ``local`` edgeserve server on this device (or any
OpenAI-compatible server standing for it) or a ``cloud`` endpoint (any OpenAI-compatible base URL,
its API key read from the environment variable the config names). A place may serve several
models: ``models: {large: qwen2-vl-7b, small: qwen2-vl-2b}``; a policy's model downgrade picks the
``small`` one. The config file (YAML or JSON) maps onto :class:`GatewayConfig`; flags win over it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sim.core.link_estimate import UPLINK_PRIOR_BPS
from sim.scenario.config import PolicyConfig
from sim.scenario.schema import ConfigError, build, load_yaml

__all__ = ["ConfigError", "GatewayConfig", "Place", "RouteConfig", "TargetConfig", "load_gateway_config",
           "parse_target"]


class Place(enum.StrEnum):
    LOCAL = "local"
    CLOUD = "cloud"


class SensorMode(enum.StrEnum):
    AUTO = "auto"  # the host's sensors where it has them, else the profile's virtual ones
    VIRTUAL = "virtual"  # the profile's virtual sensors even where the host has real ones


LARGE = "large"
SMALL = "small"


@dataclass(slots=True, frozen=True)
class TargetConfig:
    name: str
    url: str  # base URL; ``/v1`` is added when it does not end in it
    place: Place = Place.LOCAL
    api_key_env: str | None = None  # the environment variable holding the upstream's key
    models: dict[str, str] = field(default_factory=dict)  # size (large/small) → upstream model id
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"target {self.name!r}: url must start with http:// or https://, "
                              f"got {self.url!r}")
        if not self.name or any(c in self.name for c in " :/"):
            raise ConfigError(f"target name {self.name!r}: use letters, digits, '-' or '_'")
        if self.timeout_s <= 0:
            raise ConfigError(f"target {self.name!r}: timeout_s must be > 0")

    @property
    def base_url(self) -> str:
        u = self.url.rstrip("/")
        return u if u.endswith("/v1") else u + "/v1"

    @property
    def root_url(self) -> str:
        u = self.url.rstrip("/")
        return u[: -len("/v1")] if u.endswith("/v1") else u


@dataclass(slots=True, frozen=True)
class RouteConfig:
    """A kind of request, defined by example utterances, and where it goes: a place and a model
    size (``large``, the place's default, or ``small``)."""

    name: str
    examples: list[str]
    place: Place
    model: str = LARGE

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a route needs a name")
        if not self.examples or not all(isinstance(e, str) and e.strip() for e in self.examples):
            raise ConfigError(f"route {self.name!r}: give at least one example utterance")
        if self.model not in (LARGE, SMALL):
            raise ConfigError(f"route {self.name!r}: model must be {LARGE!r} or {SMALL!r}, "
                              f"got {self.model!r}")


@dataclass(slots=True, frozen=True)
class GatewayConfig:
    targets: list[TargetConfig]
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    host: str = "127.0.0.1"
    port: int = 8100
    model_name: str = "edgeserve-gateway"
    api_keys: list[str] = field(default_factory=list)  # empty: no authentication
    rate_limit_per_s: float = 0.0  # per API key (or client address); 0: unlimited
    rate_burst: int = 10
    local_overflow: bool = True  # a busy or failed local server passes the request to the cloud
    mask_cloud: bool = False  # personal data sent to cloud targets as placeholders, put back after
    trace: str | None = None
    profile: str | None = None  # a device profile: local latency model and virtual sensors
    sensors: SensorMode = SensorMode.AUTO
    max_images_per_request: int = 8
    max_image_bytes: int = 20 * 1024 * 1024
    metrics_poll_s: float = 0.25  # how often the local servers' /metrics are read
    probe_s: float = 2.0  # how often each cloud endpoint's RTT is probed
    sensor_interval_s: float = 0.25
    # the link estimate's upload rate before measurements (the simulator's replay starts there too)
    cloud_uplink_mbps: float = UPLINK_PRIOR_BPS / 1e6
    cache_capacity: int = 0  # semantic cache entries; 0: no cache
    cache_ttl_s: float = 300.0
    cache_threshold: float = 0.945  # chosen by benchmarks/gateway_cache_threshold.py
    routes: list[RouteConfig] = field(default_factory=list)  # tried after the cache, before the policy
    route_threshold: float = 0.8  # cosine similarity to a route's nearest example for a match

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("give at least one target: --local URL or --cloud URL")
        names = [t.name for t in self.targets]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"target names must be unique; repeated: {', '.join(sorted(dup))}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.rate_limit_per_s < 0 or self.rate_burst < 1:
            raise ConfigError("rate_limit_per_s must be >= 0 and rate_burst >= 1")
        for name, v in (("metrics_poll_s", self.metrics_poll_s), ("probe_s", self.probe_s),
                        ("sensor_interval_s", self.sensor_interval_s),
                        ("cloud_uplink_mbps", self.cloud_uplink_mbps)):
            if v <= 0:
                raise ConfigError(f"{name} must be > 0, got {v}")
        if self.cache_capacity < 0 or self.cache_ttl_s <= 0 or not 0 < self.cache_threshold <= 1:
            raise ConfigError("cache_capacity must be >= 0, cache_ttl_s > 0 and cache_threshold "
                              "in (0, 1]")
        if not 0 < self.route_threshold <= 1:
            raise ConfigError(f"route_threshold must be in (0, 1], got {self.route_threshold}")
        names = [r.name for r in self.routes]
        if len(set(names)) != len(names):
            raise ConfigError("route names must be unique")
        if self.sensors is SensorMode.VIRTUAL and self.profile is None:
            raise ConfigError("virtual sensors need a device profile: give --profile")

    def of(self, place: Place) -> list[TargetConfig]:
        return [t for t in self.targets if t.place is place]


CLOUD_KEY_ENV = "EDGESERVE_CLOUD_API_KEY"  # a --cloud flag's key comes from here


def parse_target(spec: str, place: Place, index: int) -> dict[str, Any]:
    """``URL`` or ``name=URL`` from a ``--local``/``--cloud`` flag, as a target mapping."""
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        name, url = f"{place.value}{index}", spec
    out: dict[str, Any] = {"name": name, "url": url, "place": place.value}
    if place is Place.CLOUD:
        out["api_key_env"] = CLOUD_KEY_ENV
    return out


def load_gateway_config(path: str | None, overrides: dict[str, Any],
                        flag_targets: list[dict[str, Any]] | None = None) -> GatewayConfig:
    """The config file's values, then ``overrides`` (flags given), validated. Targets from flags
    are added after the file's."""
    raw: dict[str, Any] = {}
    if path is not None:
        data = load_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of gateway settings")
        raw = dict(data)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    if flag_targets:
        raw["targets"] = list(raw.get("targets") or []) + flag_targets
    raw.setdefault("targets", [])
    pol = raw.get("policy")
    if isinstance(pol, str):
        raw["policy"] = {"kind": pol}
    return build(GatewayConfig, raw, "gateway")
