"""Offload policies: for each arriving request, where it runs and at what fidelity.

A policy is a small class with one method, ``decide(job, device) -> Decision``. It sees the
request (sizes, deadline) and the device's present state (:class:`sim.core.device_view.DeviceView`,
which the simulated device and the gateway's live device both offer) — temperature, clock level, battery,
queues, and predicted latencies of both paths (:meth:`sim.core.device.Device.estimate_local_s`,
:meth:`~sim.core.device.Device.estimate_cloud_s`) — and answers *local*, *cloud* or *drop*, optionally
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

from mypy_extensions import mypyc_attr

from sim.scenario.config import PolicyConfig
from sim.scenario.schema import ConfigError, build, require

if TYPE_CHECKING:
    from sim.core.device_view import DeviceView
    from sim.core.job import Job


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


# what the built-in policies answer (module constants, not class attributes: see the end)
_ALWAYS_LOCAL = Decision(Placement.LOCAL, "always local")
_ALWAYS_CLOUD = Decision(Placement.CLOUD, "always cloud")
_NO_CLOUD = Decision(Placement.LOCAL, "no cloud server")
_QUEUE_BELOW = Decision(Placement.LOCAL, "queue below threshold")
_QUEUE_AT = Decision(Placement.CLOUD, "queue at threshold")
_LOCAL_FASTER = Decision(Placement.LOCAL, "local predicted faster")
_CLOUD_FASTER = Decision(Placement.CLOUD, "cloud predicted faster")
_COOL = Decision(Placement.LOCAL, "temperature below limit")
_BATTERY_OK = Decision(Placement.LOCAL, "battery ok")
_BATTERY_LOW_OFFLOAD = Decision(Placement.CLOUD, "battery low: offload")
_LOCAL_CHEAPER = Decision(Placement.LOCAL, "local predicted to use less energy")
_RADIO_CHEAPER = Decision(Placement.CLOUD, "offload predicted to use less energy")
_FULL_RESOLUTION = Decision(Placement.LOCAL, "full resolution")
_FULL_MODEL = Decision(Placement.LOCAL, "full model")
_DEADLINE_MISSED = Decision(Placement.DROP, "deadline would be missed")
LOCAL = Decision(Placement.LOCAL, "local")
CLOUD = Decision(Placement.CLOUD, "cloud")


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled by make sim-native; still subclassable
class Policy:
    """Base class; subclasses are dataclasses whose fields are the policy's parameters."""

    name: ClassVar[str] = "policy"

    def decide(self, job: Job, device: DeviceView) -> Decision:
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


@dataclass(slots=True)
class AlwaysLocal(Policy):
    """Everything runs on the device."""


    def decide(self, job: Job, device: DeviceView) -> Decision:
        return _ALWAYS_LOCAL


@dataclass(slots=True)
class AlwaysCloud(Policy):
    """Everything goes to the cloud (local when the device has no cloud server)."""


    def decide(self, job: Job, device: DeviceView) -> Decision:
        return _ALWAYS_CLOUD if device.cloud is not None else _NO_CLOUD


@dataclass(slots=True)
class QueueThreshold(Policy):
    """Local until ``max_queue`` requests wait on the device, then offload."""

    max_queue: int = 4

    def __post_init__(self) -> None:
        require(self.max_queue >= 0, "max_queue", "must be >= 0")

    def decide(self, job: Job, device: DeviceView) -> Decision:
        if device.cloud is None or device.queue_len < self.max_queue:
            return _QUEUE_BELOW
        return _QUEUE_AT


@dataclass(slots=True)
class PredictedLatency(Policy):
    """Estimate both paths from the current state; take the faster (local wins ties by ``margin_s``)."""

    margin_s: float = 0.0

    def decide(self, job: Job, device: DeviceView) -> Decision:
        if device.cloud is None:
            return _LOCAL_FASTER
        if device.estimate_cloud_s(job) + self.margin_s < device.estimate_local_s(job):
            return _CLOUD_FASTER
        return _LOCAL_FASTER


class ThermalAction(enum.StrEnum):
    OFFLOAD = "offload"
    DOWNGRADE = "downgrade"


@dataclass(slots=True)
class ThermalAware(Policy):
    """Above ``above_c`` offload (or run locally at ``scale`` × the resolution) to let it cool."""

    above_c: float = 70.0
    action: ThermalAction = ThermalAction.OFFLOAD
    scale: float = 0.5

    def __post_init__(self) -> None:
        require(0 < self.scale <= 1, "scale", "must be in (0, 1]")

    def decide(self, job: Job, device: DeviceView) -> Decision:
        if device.temp_c < self.above_c:
            return _COOL
        if self.action is ThermalAction.OFFLOAD and device.cloud is not None:
            return Decision(Placement.CLOUD, "hot: offload")
        return Decision(Placement.LOCAL, "hot: downgrade resolution", self.scale)


@dataclass(slots=True)
class EnergyAware(Policy):
    """Battery low: offload or downgrade; else the placement predicted to use less energy.

    The battery is low below ``low_fraction`` (default the profile's). Otherwise, where the
    profile gives its units' efficiency per clock level (``thermal_network.clocks.<unit>.tops_per_w``)
    and a cloud is reachable, the request runs where the device spends less (``by_energy``): the
    units' energy at their present levels against the radio's (:mod:`sim.core.energy_estimate`).
    """

    low_fraction: float | None = None
    scale: float = 0.5
    by_energy: bool = True

    def decide(self, job: Job, device: DeviceView) -> Decision:
        frac = device.battery_fraction
        low = self.low_fraction if self.low_fraction is not None else device.battery_low_fraction
        if frac is not None and frac < low:
            if device.cloud is not None:
                return _BATTERY_LOW_OFFLOAD
            return Decision(Placement.LOCAL, "battery low: downgrade resolution", self.scale)
        if self.by_energy and device.cloud is not None:
            local_j = device.estimate_local_j(job)
            cloud_j = device.estimate_cloud_j(job)
            if local_j is not None and cloud_j is not None:
                return _RADIO_CHEAPER if cloud_j < local_j else _LOCAL_CHEAPER
        return _BATTERY_OK


@dataclass(slots=True)
class Downgrade(Policy):
    """Local always; at ``queue_above`` waiting requests, images are downscaled by ``scale``."""

    queue_above: int = 2
    scale: float = 0.5

    def __post_init__(self) -> None:
        require(0 < self.scale <= 1, "scale", "must be in (0, 1]")

    def decide(self, job: Job, device: DeviceView) -> Decision:
        if device.queue_len < self.queue_above:
            return _FULL_RESOLUTION
        return Decision(Placement.LOCAL, "queue long: downgrade resolution", self.scale)


@dataclass(slots=True)
class ModelDowngrade(Policy):
    """Local; under load (``queue_above`` waiting) or heat (``above_c``) use the smaller ``model``."""

    model: str = "small"
    queue_above: int = 2
    above_c: float | None = None

    def decide(self, job: Job, device: DeviceView) -> Decision:
        if device.queue_len >= self.queue_above:
            return Decision(Placement.LOCAL, "queue long: smaller model", model=self.model)
        if self.above_c is not None and device.temp_c >= self.above_c:
            return Decision(Placement.LOCAL, "hot: smaller model", model=self.model)
        return _FULL_MODEL


@dataclass(slots=True)
class FrameDrop(Policy):
    """Run where predicted faster; drop a frame whose deadline neither path can meet."""


    def decide(self, job: Job, device: DeviceView) -> Decision:
        local = device.estimate_local_s(job)
        cloud = device.estimate_cloud_s(job)
        best = min(local, cloud)
        dl = job.rec.deadline_s
        if dl is not None and device.loop.now + best > dl:
            return _DEADLINE_MISSED
        return _CLOUD_FASTER if cloud < local else _LOCAL_FASTER


# The built-ins are compiled by make sim-native, where a dataclass must not declare a ClassVar
# (mypyc would make it a field, mypyc/mypyc#1122), carry a decorator besides @dataclass, or keep its
# docstring: their names and one-line summaries are set, and they are registered, here.
_ABOUT: dict[type[Policy], str] = {}
for _cls, _name, _about in (
    (AlwaysLocal, "always_local", "Everything runs on the device."),
    (AlwaysCloud, "always_cloud",
     "Everything goes to the cloud (local when the device has no cloud server)."),
    (QueueThreshold, "queue_threshold", "Local until ``max_queue`` requests wait on the device, then offload."),
    (PredictedLatency, "predicted_latency",
     "Estimate both paths from the current state; take the faster (local wins ties by ``margin_s``)."),
    (ThermalAware, "thermal_aware",
     "Above ``above_c`` offload (or run locally at ``scale`` × the resolution) to let it cool."),
    (EnergyAware, "energy_aware",
     "Battery low: offload or downgrade; else the placement predicted to use less energy."),
    (Downgrade, "downgrade",
     "Local always; at ``queue_above`` waiting requests, images are downscaled by ``scale``."),
    (ModelDowngrade, "model_downgrade",
     "Local; under load (``queue_above`` waiting) or heat (``above_c``) use the smaller ``model``."),
    (FrameDrop, "frame_drop",
     "Run where predicted faster; drop a frame whose deadline neither path can meet."),
):
    _cls.name = _name
    _ABOUT[_cls] = _about
    register(_cls)


def describe() -> list[tuple[str, str]]:
    """(name, one-line summary: the first docstring line) of every registered policy."""
    out = []
    for name, cls in POLICIES.items():
        doc = (getattr(cls, "__doc__", None) or "").strip().splitlines()
        out.append((name, _ABOUT.get(cls) or (doc[0] if doc else "")))
    return out

