"""Offload policies: for each arriving request, where it runs and at what fidelity.

A policy is a small class with one method, ``decide(job, device) -> Decision``. It sees the
request (sizes, deadline) and the device's present state — temperature, clock level, battery,
queues, and predicted latencies of both paths (:meth:`sim.device.Device.estimate_local_s`,
:meth:`~sim.device.Device.estimate_cloud_s`) — and answers *local*, *cloud* or *drop*, optionally
with a resolution downgrade. Every decision carries a reason, recorded with the request.

Write your own by subclassing :class:`Policy` as a dataclass (its fields are the YAML ``params``)
and registering it with :func:`register`::

    @register
    @dataclass
    class Busy(Policy):
        name: ClassVar[str] = "busy"
        max_running: int = 3
        def decide(self, job, device):
            return CLOUD if device.running >= self.max_running else LOCAL
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sim.config import PolicyConfig
from sim.schema import ConfigError, build, require

if TYPE_CHECKING:
    from sim.device import Device
    from sim.job import Job


class Placement(enum.StrEnum):
    LOCAL = "local"
    CLOUD = "cloud"
    DROP = "drop"


@dataclass(slots=True, frozen=True)
class Decision:
    placement: Placement
    reason: str
    resolution_scale: float = 1.0  # < 1: downscale the image (fewer pixels, bytes and tokens)
    model: str | None = None  # local only: run on this smaller model (profile llm_variants)


LOCAL = Decision(Placement.LOCAL, "local")
CLOUD = Decision(Placement.CLOUD, "cloud")


class Policy:
    """Base class; subclasses are dataclasses whose fields are the policy's parameters."""

    name: ClassVar[str] = "policy"

    def decide(self, job: Job, device: Device) -> Decision:
        raise NotImplementedError


POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    POLICIES[cls.name] = cls
    return cls


def make_policy(cfg: PolicyConfig | str | Policy) -> Policy:
    """A policy from its config (``kind`` + ``params``), its name, or as is."""
    if isinstance(cfg, Policy):
        return cfg
    if isinstance(cfg, str):
        cfg = PolicyConfig(kind=cfg)
    cls = POLICIES.get(cfg.kind)
    if cls is None:
        raise ConfigError(f"policy.kind: unknown policy {cfg.kind!r} (known: {', '.join(POLICIES)})")
    return build(cls, cfg.params, "policy.params")


@register
@dataclass(slots=True)
class AlwaysLocal(Policy):
    """Everything runs on the device."""

    name: ClassVar[str] = "always_local"
    _d: ClassVar[Decision] = Decision(Placement.LOCAL, "always local")

    def decide(self, job: Job, device: Device) -> Decision:
        return self._d


@register
@dataclass(slots=True)
class AlwaysCloud(Policy):
    """Everything goes to the cloud (local when the device has no cloud server)."""

    name: ClassVar[str] = "always_cloud"
    _d: ClassVar[Decision] = Decision(Placement.CLOUD, "always cloud")
    _none: ClassVar[Decision] = Decision(Placement.LOCAL, "no cloud server")

    def decide(self, job: Job, device: Device) -> Decision:
        return self._d if device.cloud is not None else self._none


@register
@dataclass(slots=True)
class QueueThreshold(Policy):
    """Local until ``max_queue`` requests wait on the device, then offload."""

    name: ClassVar[str] = "queue_threshold"
    max_queue: int = 4
    _below: ClassVar[Decision] = Decision(Placement.LOCAL, "queue below threshold")
    _above: ClassVar[Decision] = Decision(Placement.CLOUD, "queue at threshold")

    def __post_init__(self) -> None:
        require(self.max_queue >= 0, "max_queue", "must be >= 0")

    def decide(self, job: Job, device: Device) -> Decision:
        if device.cloud is None or device.queue_len < self.max_queue:
            return self._below
        return self._above


@register
@dataclass(slots=True)
class PredictedLatency(Policy):
    """Estimate both paths from the current state; take the faster (local wins ties by ``margin_s``)."""

    name: ClassVar[str] = "predicted_latency"
    margin_s: float = 0.0
    _local: ClassVar[Decision] = Decision(Placement.LOCAL, "local predicted faster")
    _cloud: ClassVar[Decision] = Decision(Placement.CLOUD, "cloud predicted faster")

    def decide(self, job: Job, device: Device) -> Decision:
        if device.cloud is None:
            return self._local
        if device.estimate_cloud_s(job) + self.margin_s < device.estimate_local_s(job):
            return self._cloud
        return self._local


class ThermalAction(enum.StrEnum):
    OFFLOAD = "offload"
    DOWNGRADE = "downgrade"


@register
@dataclass(slots=True)
class ThermalAware(Policy):
    """Above ``above_c`` offload (or run locally at ``scale`` × the resolution) to let it cool."""

    name: ClassVar[str] = "thermal_aware"
    above_c: float = 70.0
    action: ThermalAction = ThermalAction.OFFLOAD
    scale: float = 0.5
    _cool: ClassVar[Decision] = Decision(Placement.LOCAL, "temperature below limit")

    def __post_init__(self) -> None:
        require(0 < self.scale <= 1, "scale", "must be in (0, 1]")

    def decide(self, job: Job, device: Device) -> Decision:
        if device.temp_c < self.above_c:
            return self._cool
        if self.action is ThermalAction.OFFLOAD and device.cloud is not None:
            return Decision(Placement.CLOUD, "hot: offload")
        return Decision(Placement.LOCAL, "hot: downgrade resolution", self.scale)


@register
@dataclass(slots=True)
class EnergyAware(Policy):
    """When the battery is low (below ``low_fraction``, default the profile's), offload or downgrade."""

    name: ClassVar[str] = "energy_aware"
    low_fraction: float | None = None
    scale: float = 0.5
    _ok: ClassVar[Decision] = Decision(Placement.LOCAL, "battery ok")
    _low_cloud: ClassVar[Decision] = Decision(Placement.CLOUD, "battery low: offload")

    def decide(self, job: Job, device: Device) -> Decision:
        frac = device.battery_fraction
        low = self.low_fraction if self.low_fraction is not None else device.battery_low_fraction
        if frac is None or frac >= low:
            return self._ok
        if device.cloud is not None:
            return self._low_cloud
        return Decision(Placement.LOCAL, "battery low: downgrade resolution", self.scale)


@register
@dataclass(slots=True)
class Downgrade(Policy):
    """Local always; at ``queue_above`` waiting requests, images are downscaled by ``scale``."""

    name: ClassVar[str] = "downgrade"
    queue_above: int = 2
    scale: float = 0.5
    _full: ClassVar[Decision] = Decision(Placement.LOCAL, "full resolution")

    def __post_init__(self) -> None:
        require(0 < self.scale <= 1, "scale", "must be in (0, 1]")

    def decide(self, job: Job, device: Device) -> Decision:
        if device.queue_len < self.queue_above:
            return self._full
        return Decision(Placement.LOCAL, "queue long: downgrade resolution", self.scale)


@register
@dataclass(slots=True)
class ModelDowngrade(Policy):
    """Local; under load (``queue_above`` waiting) or heat (``above_c``) use the smaller ``model``."""

    name: ClassVar[str] = "model_downgrade"
    model: str = "small"
    queue_above: int = 2
    above_c: float | None = None
    _full: ClassVar[Decision] = Decision(Placement.LOCAL, "full model")

    def decide(self, job: Job, device: Device) -> Decision:
        if device.queue_len >= self.queue_above:
            return Decision(Placement.LOCAL, "queue long: smaller model", model=self.model)
        if self.above_c is not None and device.temp_c >= self.above_c:
            return Decision(Placement.LOCAL, "hot: smaller model", model=self.model)
        return self._full


@register
@dataclass(slots=True)
class FrameDrop(Policy):
    """Run where predicted faster; drop a frame whose deadline neither path can meet."""

    name: ClassVar[str] = "frame_drop"
    _local: ClassVar[Decision] = Decision(Placement.LOCAL, "local predicted faster")
    _cloud: ClassVar[Decision] = Decision(Placement.CLOUD, "cloud predicted faster")
    _drop: ClassVar[Decision] = Decision(Placement.DROP, "deadline would be missed")

    def decide(self, job: Job, device: Device) -> Decision:
        local = device.estimate_local_s(job)
        cloud = device.estimate_cloud_s(job)
        best = min(local, cloud)
        dl = job.rec.deadline_s
        if dl is not None and device.loop.now + best > dl:
            return self._drop
        return self._cloud if cloud < local else self._local


def describe() -> list[tuple[str, str]]:
    """(name, first docstring line) of every registered policy."""
    out = []
    for name, cls in POLICIES.items():
        doc = (cls.__doc__ or "").strip().splitlines()
        out.append((name, doc[0] if doc else ""))
    return out

