"""Scenario configuration: typed, frozen dataclasses validated on construction, and loading.

A *profile* describes hardware (:mod:`sim.scenario.profiles`: :class:`DeviceProfile`,
:class:`CloudProfile`, re-exported here). A *scenario* puts devices with their
workloads and network links next to cloud servers, picks a policy and says how long to run.

Both are YAML files (``models/profiles/*.yaml``, ``sim/scenarios/*.yaml``). A scenario names a
profile (``profile: jetson-orin-nano``) or inlines one; :func:`load_scenario` resolves names,
applies ``--set`` style overrides and validates everything, raising
:class:`~sim.scenario.schema.ConfigError` with the path of the bad field.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.scenario.deployment import BOX_DIR, Deployment
from sim.scenario.profiles import CloudProfile, DeviceProfile
from sim.scenario.schema import (
    ConfigError,
    build,
    load_yaml,
    non_negative,
    positive,
    require,
)

PROFILE_DIR = Path(__file__).resolve().parents[2] / "models" / "profiles"
SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"


@dataclass(slots=True, frozen=True)
class LinkConfig:
    """Wireless/wired link to the cloud: ``bytes/bandwidth + RTT/2 + jitter``, loss retransmits."""

    uplink_mbps: float = 20.0
    downlink_mbps: float = 50.0
    rtt_ms: float = 40.0
    jitter_ms: float = 5.0  # exponential, mean
    loss: float = 0.0  # probability that one transfer attempt is lost
    rto_ms: float = 200.0  # wait before a retransmission
    response_bytes_per_token: float = 4.0
    request_overhead_bytes: int = 2000  # headers + prompt text

    def __post_init__(self) -> None:
        positive(self.uplink_mbps, "uplink_mbps")
        positive(self.downlink_mbps, "downlink_mbps")
        non_negative(self.rtt_ms, "rtt_ms")
        non_negative(self.jitter_ms, "jitter_ms")
        require(0 <= self.loss < 1, "loss", f"must be within [0, 1), got {self.loss}")
        non_negative(self.rto_ms, "rto_ms")


@dataclass(slots=True, frozen=True)
class ImageSize:
    width: int
    height: int
    weight: float = 1.0

    def __post_init__(self) -> None:
        positive(self.width, "width")
        positive(self.height, "height")
        positive(self.weight, "weight")


_DEFAULT_MIN_PIXELS, _DEFAULT_MAX_PIXELS = 56 * 56, 28 * 28 * 1280


@dataclass(slots=True, frozen=True)
class ImageConfig:
    """Source images and the model's smart_resize rule (Qwen2-VL: 28-px factor, 2×2 merge).

    ``family`` (``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_5``) takes the rule from that
    Qwen-VL family's spec (:mod:`mm_preproc.spec`, the numbers the runtime preprocesses with):
    ``factor`` and ``pixels_per_token`` (32 and 32² for Qwen3-VL), and — where they are left at
    the Qwen2-VL defaults — the family's ``min_pixels`` and 1280 image tokens' ``max_pixels``.
    """

    sizes: list[ImageSize] = field(default_factory=lambda: [ImageSize(1280, 720)])
    jpeg_bytes_per_pixel: float = 0.25
    factor: int = 28
    min_pixels: int = _DEFAULT_MIN_PIXELS
    max_pixels: int = _DEFAULT_MAX_PIXELS
    pixels_per_token: int = 28 * 28
    family: str | None = None

    def __post_init__(self) -> None:
        if self.family is not None:
            self._apply_family(self.family)
        require(len(self.sizes) > 0, "sizes", "needs at least one size")
        positive(self.jpeg_bytes_per_pixel, "jpeg_bytes_per_pixel")
        positive(self.factor, "factor")
        require(self.max_pixels >= self.min_pixels, "max_pixels", "must be >= min_pixels")

    def _apply_family(self, name: str) -> None:
        from mm_preproc.spec import PRESETS, Family

        try:
            spec = PRESETS[Family(name)]
        except ValueError:
            names = ", ".join(f.value for f in Family)
            raise ValueError(f"family: must be one of {names}, got {name!r}") from None
        object.__setattr__(self, "factor", spec.factor)
        object.__setattr__(self, "pixels_per_token", spec.factor * spec.factor)
        if self.min_pixels == _DEFAULT_MIN_PIXELS:
            object.__setattr__(self, "min_pixels", spec.min_pixels)
        if self.max_pixels == _DEFAULT_MAX_PIXELS:
            object.__setattr__(self, "max_pixels", spec.budget(1280))


@dataclass(slots=True, frozen=True)
class PrefixConfig:
    """Shared prompt prefixes: the same system prompt or few-shot examples before many prompts.

    ``count`` distinct prefixes of ``tokens`` tokens each open the prompt's text (so ``tokens``
    is at most the workload's ``text_tokens``: enabling prefixes changes no prompt's length, only
    what a prefix cache can skip). Request ``i`` draws prefix ``k`` with probability
    ``∝ 1 / (k + 1)^zipf_s`` (0, the default: uniform; 1: the few popular apps of a Zipf law).
    Prefix ids are ``NAME:k`` with ``name`` defaulting to the device entry's name, so every copy
    of a fleet entry shares its prefixes and entries with the same ``name`` share theirs.
    ``count: 0`` (the default): requests carry no prefix.
    """

    count: int = 0
    tokens: int = 0
    zipf_s: float = 0.0
    name: str | None = None

    def __post_init__(self) -> None:
        non_negative(self.count, "count")
        non_negative(self.tokens, "tokens")
        non_negative(self.zipf_s, "zipf_s")
        if self.count > 0:
            require(self.tokens > 0, "tokens", "prefixes (count > 0) need tokens > 0")

    @property
    def on(self) -> bool:
        return self.count > 0


class WorkloadKind(enum.StrEnum):
    POISSON = "poisson"  # exponential inter-arrivals at rate_hz
    GAMMA = "gamma"  # bursty: gamma inter-arrivals with mean 1/rate_hz and coefficient of variation cv
    PERIODIC = "periodic"  # camera streams at fps each, per-frame deadlines
    REPLAY = "replay"  # arrivals and sizes of a recorded trace


@dataclass(slots=True, frozen=True)
class WorkloadConfig:
    kind: WorkloadKind = WorkloadKind.POISSON
    rate_hz: float = 1.0
    cv: float = 1.0
    fps: float = 1.0
    streams: int = 1
    deadline_s: float | None = None  # per-request deadline after arrival (periodic: default 1/fps)
    trace: str | None = None
    trace_device: str | None = None  # replay: only records of this device (None: all)
    time_scale: float = 1.0  # replay: stretch inter-arrival times
    image: ImageConfig = field(default_factory=ImageConfig)
    text_tokens: int = 32
    output_tokens: list[int] = field(default_factory=lambda: [32, 32])  # uniform [lo, hi]
    # shared prompt prefixes (replay: for records that name none); default: none
    prefix: PrefixConfig = field(default_factory=PrefixConfig)

    def __post_init__(self) -> None:
        positive(self.rate_hz, "rate_hz")
        positive(self.cv, "cv")
        positive(self.fps, "fps")
        positive(self.streams, "streams")
        positive(self.time_scale, "time_scale")
        if self.deadline_s is not None:
            positive(self.deadline_s, "deadline_s")
        non_negative(self.text_tokens, "text_tokens")
        lo_hi = self.output_tokens
        require(len(lo_hi) == 2 and 1 <= lo_hi[0] <= lo_hi[1], "output_tokens",
                f"must be [lo, hi] with 1 <= lo <= hi, got {lo_hi}")
        if self.kind is WorkloadKind.REPLAY:
            require(self.trace is not None, "trace", "a replay workload needs a trace file")
        elif self.prefix.on:
            require(self.prefix.tokens <= self.text_tokens, "prefix.tokens",
                    f"a prefix opens the prompt's text: at most text_tokens ({self.text_tokens}), "
                    f"got {self.prefix.tokens}")


@dataclass(slots=True, frozen=True)
class JitterConfig:
    """Per-device spread of a device entry's parameters (fleets: no two devices quite alike).

    Each device of the entry draws its own multipliers, uniform in ``[1 − x, 1 + x]``, from a
    stream seeded by (scenario seed, device name): ``rate`` scales its workload's ``rate_hz`` and
    ``fps``, ``link`` its link's bandwidths and RTT (each drawn separately); ``ambient_c`` shifts
    its thermal ambient by a uniform ``±ambient_c`` °C. All zero (the default): identical copies.
    """

    rate: float = 0.0
    link: float = 0.0
    ambient_c: float = 0.0

    def __post_init__(self) -> None:
        require(0 <= self.rate < 1, "rate", f"must be within [0, 1), got {self.rate}")
        require(0 <= self.link < 1, "link", f"must be within [0, 1), got {self.link}")
        non_negative(self.ambient_c, "ambient_c")

    @property
    def any(self) -> bool:
        return bool(self.rate or self.link or self.ambient_c)


@dataclass(slots=True, frozen=True)
class CloudEstimatePrior:
    """Where a device entry's ``observed_cloud_estimate`` starts: a round trip, an upload rate and
    a service time. A figure left out (None) starts where ``edgeserve gateway`` starts it
    (:mod:`sim.core.link_estimate`: 50 ms, 20 Mbit/s, 1 s); the replay of a gateway trace gives
    the round trip and upload rate the gateway measured, where its records carry them."""

    rtt_s: float | None = None
    uplink_mbps: float | None = None
    service_s: float | None = None

    def __post_init__(self) -> None:
        if self.rtt_s is not None:
            non_negative(self.rtt_s, "rtt_s")
        if self.uplink_mbps is not None:
            positive(self.uplink_mbps, "uplink_mbps")
        if self.service_s is not None:
            non_negative(self.service_s, "service_s")


@dataclass(slots=True, frozen=True)
class DeviceEntry:
    """Devices in a scenario: ``count`` copies of a profile, each with its own workload and link.

    The copies are named ``NAME-0`` … ``NAME-<count−1>`` and each draws from its own random
    streams (seeded by scenario seed and device name); ``jitter`` spreads their parameters. The
    entry is the devices' *class* in summaries.

    ``observed_estimate``: the policy reads the local latency the way ``edgeserve gateway`` predicts
    it (:mod:`sim.core.observed_estimate`: the idle prediction × the moving ratio of observed to
    predicted service × (1 + queue)), learnt from the device's own finished local requests, in
    place of the device's queue-aware model estimate. A replay of a gateway trace turns it on.

    ``observed_cloud_estimate``: the policy reads the cloud latency the way ``edgeserve gateway``
    predicts it (:mod:`sim.core.link_estimate`: moving round trip + the request's upload at the
    moving upload rate + moving service time), learnt from the device's own finished cloud calls
    and starting at ``cloud_estimate_prior``, in place of the link's and the cloud server's model
    estimate. A flag of its own, not a part of ``observed_estimate``: each of the two estimates can
    be turned back to the model's alone, to tell what each one changes in a replay, and only this
    one has starting figures to give. A replay of a gateway trace turns both on.
    """

    name: str
    profile: DeviceProfile
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    count: int = 1
    cloud: str | None = None  # server to offload to; None: the first one
    jitter: JitterConfig = field(default_factory=JitterConfig)
    observed_estimate: bool = False  # the gateway's local estimate (see above)
    observed_cloud_estimate: bool = False  # the gateway's cloud estimate (see above)
    cloud_estimate_prior: CloudEstimatePrior = field(default_factory=CloudEstimatePrior)

    def __post_init__(self) -> None:
        positive(self.count, "count")


@dataclass(slots=True, frozen=True)
class CloudEntry:
    """A cloud server: ``replicas`` copies of the profile's model, deployed as ``deployment``
    says (:mod:`sim.scenario.deployment`: tensor parallelism, checkpoint size, prefix caching).

    ``replicas`` left out is ``deployment.gpus // deployment.tp_size`` when the deployment names
    its GPUs (a box), else 1 — so sweeping ``deployment.tp_size`` over a box of ``gpus`` GPUs
    compares its layouts (4 GPUs: 4×TP1, 2×TP2, 1×TP4) at the same GPU count.
    """

    name: str
    profile: CloudProfile
    replicas: int | None = None
    deployment: Deployment = field(default_factory=Deployment)

    def __post_init__(self) -> None:
        d = self.deployment
        if self.replicas is not None:
            positive(self.replicas, "replicas")
        else:
            require(d.gpus == 0 or d.gpus >= d.tp_size, "deployment.tp_size",
                    f"tp_size {d.tp_size} is more than the box's {d.gpus} GPUs")
        if d.gpus:
            require(self.replica_count * d.tp_size <= d.gpus, "replicas",
                    f"{self.replica_count} replicas × tp_size {d.tp_size} need "
                    f"{self.replica_count * d.tp_size} GPUs; the box has {d.gpus}")
        if d.tp_size > 1:
            require(self.profile.server.step is None, "deployment.tp_size",
                    "tensor parallelism is priced by the roofline; this profile has a fitted "
                    "server.step model, which is not re-priced (drop server.step or tp_size)")

    @property
    def replica_count(self) -> int:
        if self.replicas is not None:
            return self.replicas
        d = self.deployment
        return max(1, d.gpus // d.tp_size) if d.gpus else 1


@dataclass(slots=True, frozen=True)
class PolicyConfig:
    kind: str = "always_local"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class SloConfig:
    e2e_s: float = 2.0
    ttft_s: float | None = None

    def __post_init__(self) -> None:
        positive(self.e2e_s, "e2e_s")


@dataclass(slots=True, frozen=True)
class Scenario:
    name: str
    devices: list[DeviceEntry]
    cloud: list[CloudEntry] = field(default_factory=list)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    seed: int = 0
    duration_s: float | None = None  # stop arrivals after this simulated time …
    requests: int | None = None  # … or after this many arrivals (whichever first)
    sample_interval_s: float = 1.0  # DeviceSample cadence
    slo: SloConfig = field(default_factory=SloConfig)
    description: str = ""
    # per-device statistics and summary rows; None: only for scenarios of at most
    # PER_DEVICE_AUTO_MAX devices (larger fleets are summarized per class and for the fleet)
    per_device: bool | None = None

    def __post_init__(self) -> None:
        require(len(self.devices) > 0, "devices", "needs at least one device")
        require(self.duration_s is not None or self.requests is not None, "duration_s",
                "set duration_s or requests (or both)")
        if self.duration_s is not None:
            positive(self.duration_s, "duration_s")
        if self.requests is not None:
            positive(self.requests, "requests")
        positive(self.sample_interval_s, "sample_interval_s")
        names = [d.name for d in self.devices] + [c.name for c in self.cloud]
        require(len(names) == len(set(names)), "devices", "device and cloud names must be unique")
        clouds = {c.name for c in self.cloud}
        for i, d in enumerate(self.devices):
            if d.cloud is not None:
                require(d.cloud in clouds, f"devices[{i}].cloud", f"no cloud server {d.cloud!r}")


    @property
    def device_count(self) -> int:
        return sum(d.count for d in self.devices)

    @property
    def per_device_detail(self) -> bool:
        """Whether statistics are kept per device (else per class, i.e. device entry)."""
        if self.per_device is not None:
            return self.per_device
        return self.device_count <= PER_DEVICE_AUTO_MAX


PER_DEVICE_AUTO_MAX = 100


# ---- loading ------------------------------------------------------------------------------


def resolve_profile_path(ref: str, base_dir: Path | None) -> Path:
    """A profile reference is a path (relative to the scenario) or a name in models/profiles/
    (or, for cloud servers, a box profile's name in models/profiles/boxes/)."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        return p
    p = PROFILE_DIR / f"{ref}.yaml"
    box = BOX_DIR / f"{ref}.yaml"
    return box if not p.exists() and box.exists() else p


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def inline_profiles(raw: Any, base_dir: Path | None = None) -> Any:
    """Replace profile names in a raw scenario mapping by the profile mappings they name, and
    resolve replay trace paths relative to the scenario file."""
    if not isinstance(raw, dict):
        raise ConfigError(f"scenario: expected a mapping, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    for section in ("devices", "cloud"):
        entries = raw.get(section) or []
        if not isinstance(entries, list):
            continue
        for i, entry in enumerate(entries):
            wl = entry.get("workload") if isinstance(entry, dict) else None
            if isinstance(wl, dict) and isinstance(wl.get("trace"), str):  # replay file
                tp = Path(wl["trace"])
                if not tp.is_absolute() and base_dir is not None and not tp.exists():
                    tp = base_dir / tp
                if not tp.exists():
                    raise ConfigError(f"scenario.{section}[{i}].workload.trace: no such file "
                                      f"{wl['trace']!r}")
                wl["trace"] = str(tp)
            if isinstance(entry, dict) and isinstance(entry.get("profile"), str):
                path = resolve_profile_path(entry["profile"], base_dir)
                if not path.exists():
                    raise ConfigError(
                        f"scenario.{section}[{i}].profile: no profile {entry['profile']!r} "
                        f"(looked for {path}; shipped: {', '.join(available_profiles())})"
                    )
                entry["profile"] = load_yaml(path)
                _box_deployment(entry, section)
            if isinstance(entry, dict) and "profile_set" in entry:  # tweaks of a named profile
                tweaks = entry.pop("profile_set")
                if not isinstance(tweaks, dict) or not isinstance(entry.get("profile"), dict):
                    raise ConfigError(f"scenario.{section}[{i}].profile_set: expected a mapping "
                                      "of KEY.PATH: VALUE next to a profile")
                for key, value in tweaks.items():
                    set_path(entry["profile"], str(key), value)
    return raw


def _box_deployment(entry: dict[str, Any], section: str) -> None:
    """A box profile (a cloud profile with a ``deployment:`` section) named by a cloud entry:
    its deployment becomes the entry's, the entry's own ``deployment`` keys winning."""
    prof = entry["profile"]
    if section != "cloud" or not isinstance(prof, dict) or "deployment" not in prof:
        return
    dep = dict(prof.pop("deployment") or {})
    own = entry.get("deployment")
    if isinstance(own, dict):
        dep.update(own)
    entry["deployment"] = dep


def set_path(raw: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` (or ``a.b[0].c``) in nested dicts/lists, creating mappings as needed."""
    keys = dotted.replace("[", ".").replace("]", "").split(".")
    node = raw
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            try:
                idx = int(k)
                if last:
                    node[idx] = value
                else:
                    node = node[idx]
            except (ValueError, IndexError):
                raise ConfigError(f"{dotted}: {k!r} is not an index of a {len(node)}-item list") from None
        elif isinstance(node, dict):
            if last:
                node[k] = value
            else:
                node = node.setdefault(k, {})
        else:
            raise ConfigError(f"{dotted}: cannot set {k!r} inside a {type(node).__name__}")


def parse_override(text: str) -> tuple[str, Any]:
    """``key.path=value`` with the value parsed as YAML (numbers, lists, booleans)."""
    key, sep, val = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"{text!r}: expected KEY.PATH=VALUE")
    import yaml

    return key.strip(), yaml.safe_load(val)


def scenario_from_raw(raw: Any, base_dir: Path | None = None,
                      overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    raw = inline_profiles(raw, base_dir)
    for key, value in overrides or []:
        set_path(raw, key, value)
    return build(Scenario, raw, "scenario")


def scenario_path(path: str | Path | None) -> Path:
    """The file of a scenario: a path, a built-in scenario's name, or ``None`` (the default)."""
    p = Path(path) if path is not None else SCENARIO_DIR / "default.yaml"
    if path is not None and not p.exists() and (SCENARIO_DIR / f"{path}.yaml").exists():
        p = SCENARIO_DIR / f"{path}.yaml"  # a built-in scenario by name
    return p


def load_scenario(path: str | Path | None = None,
                  overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    """Load a scenario YAML (``None``: the built-in default) with optional overrides."""
    p = scenario_path(path)
    return scenario_from_raw(load_yaml(p), p.parent, overrides)


def load_raw(path: str | Path | None) -> tuple[dict[str, Any], Path]:
    """A scenario file (or the default) as a raw mapping with profiles inlined, and its path."""
    p = scenario_path(path)
    return inline_profiles(load_yaml(p), p.parent), p


def load_device_profile(ref: str | Path) -> DeviceProfile:
    p = resolve_profile_path(str(ref), None)
    return build(DeviceProfile, load_yaml(p), f"profile {p.stem}")


def load_cloud_profile(ref: str | Path) -> CloudProfile:
    p = resolve_profile_path(str(ref), None)
    return build(CloudProfile, load_yaml(p), f"profile {p.stem}")


__all__ = ["ConfigError", "Scenario", "load_scenario"]
