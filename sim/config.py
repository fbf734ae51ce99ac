"""Scenario and profile configuration: typed, frozen dataclasses validated on construction.

A *profile* describes hardware: an edge device (:class:`DeviceProfile`: compute units, per-stage
service-time models, DVFS levels, thermal RC node, battery) or a cloud LLM server
(:class:`CloudProfile`: GPU, model shape, serving knobs). A *scenario* puts devices with their
workloads and network links next to cloud servers, picks a policy and says how long to run.

Both are YAML files (``models/profiles/*.yaml``, ``sim/scenarios/*.yaml``). A scenario names a
profile (``profile: jetson-orin-nano``) or inlines one; :func:`load_scenario` resolves names,
applies ``--set`` style overrides and validates everything, raising
:class:`~sim.schema.ConfigError` with the path of the bad field.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.schema import (
    ConfigError,
    build,
    fraction,
    load_yaml,
    non_negative,
    positive,
    require,
)

PROFILE_DIR = Path(__file__).resolve().parent.parent / "models" / "profiles"
SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

#: Request features a service-time model may depend on (linear coefficients in ``per``).
FEATURES = (
    "source_pixels",  # decoded image pixels (width × height of the original)
    "target_pixels",  # pixels after smart_resize
    "image_tokens",  # vision tokens after the 2×2 merge
    "prompt_tokens",  # whole prompt, image tokens included
    "output_tokens",
    "batch",  # decode step: requests in the running batch
    "context_tokens",  # decode step: KV tokens of the whole batch
)


class ServiceKind(enum.StrEnum):
    DETERMINISTIC = "deterministic"  # exactly the linear mean
    EXPONENTIAL = "exponential"  # exponential with that mean (M/M/k queues)
    LOGNORMAL = "lognormal"  # lognormal with that mean and coefficient of variation ``cv``
    EMPIRICAL = "empirical"  # a recorded sample, scaled so its mean is the linear mean


@dataclass(slots=True, frozen=True)
class ServiceModelConfig:
    """Service time of one stage: ``base_s + Σ per[feature] · feature`` seconds at clock scale 1.

    The mean is linear in the request's features; ``kind`` adds the spread around it.
    """

    kind: ServiceKind = ServiceKind.DETERMINISTIC
    base_s: float = 0.0
    per: dict[str, float] = field(default_factory=dict)
    cv: float = 0.0
    samples_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        non_negative(self.base_s, "base_s")
        for k, v in self.per.items():
            require(k in FEATURES, f"per.{k}", f"unknown feature (known: {', '.join(FEATURES)})")
            non_negative(v, f"per.{k}")
        non_negative(self.cv, "cv")
        if self.kind is ServiceKind.EMPIRICAL:
            require(len(self.samples_s) > 0, "samples_s", "an empirical model needs samples")
            require(all(s > 0 for s in self.samples_s), "samples_s", "samples must be > 0")


class UnitKind(enum.StrEnum):
    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"


@dataclass(slots=True, frozen=True)
class UnitConfig:
    """A compute unit: ``count`` identical servers (CPU cores) with idle and active power each."""

    kind: UnitKind
    count: int = 1
    idle_w: float = 0.0
    active_w: float = 1.0

    def __post_init__(self) -> None:
        positive(self.count, "count")
        non_negative(self.idle_w, "idle_w")
        require(self.active_w >= self.idle_w, "active_w", "must be >= idle_w")


class StageName(enum.StrEnum):
    IMAGE_DECODE = "image_decode"
    RESIZE = "resize"
    NORMALIZE = "normalize"
    ENCODE = "encode"
    PREFILL = "prefill"
    DECODE_STEP = "decode_step"


CPU_STAGE_NAMES = (StageName.IMAGE_DECODE, StageName.RESIZE, StageName.NORMALIZE)
REQUIRED_STAGES = (*CPU_STAGE_NAMES, StageName.PREFILL, StageName.DECODE_STEP)


@dataclass(slots=True, frozen=True)
class StageConfig:
    unit: str
    model: ServiceModelConfig = field(default_factory=ServiceModelConfig)


@dataclass(slots=True, frozen=True)
class DvfsLevel:
    """A clock level: service times stretch by ``scale``; dynamic power is times ``power_scale``."""

    scale: float = 1.0
    power_scale: float = 1.0

    def __post_init__(self) -> None:
        require(self.scale >= 1.0, "scale", f"must be >= 1 (level 0 is nominal), got {self.scale}")
        positive(self.power_scale, "power_scale")


@dataclass(slots=True, frozen=True)
class TripConfig:
    """Throttle one level more at ``temp_c``; release it below ``temp_c - hysteresis_c``."""

    temp_c: float
    hysteresis_c: float = 2.0

    def __post_init__(self) -> None:
        non_negative(self.hysteresis_c, "hysteresis_c")


class GovernorKind(enum.StrEnum):
    STEP_WISE = "step_wise"
    POWER_ALLOCATOR = "power_allocator"


@dataclass(slots=True, frozen=True)
class PidConfig:
    """Linux power_allocator-like governor: a PID on ``control_temp_c − T`` sets a power budget."""

    control_temp_c: float = 80.0
    sustainable_power_w: float = 5.0
    k_p: float = 0.5
    k_i: float = 0.05
    k_d: float = 0.0
    interval_s: float = 0.1
    switch_on_below_c: float = 10.0  # governor idle (full speed) below control − this

    def __post_init__(self) -> None:
        positive(self.sustainable_power_w, "sustainable_power_w")
        non_negative(self.switch_on_below_c, "switch_on_below_c")
        positive(self.interval_s, "interval_s")


@dataclass(slots=True, frozen=True)
class ThermalConfig:
    """Lumped RC node: ``C·dT/dt = P − (T − T_amb)/R``. Time constant ``R·C`` seconds."""

    r_c_per_w: float
    c_j_per_c: float
    ambient_c: float = 25.0
    initial_c: float | None = None  # None: start at ambient
    trips: list[TripConfig] = field(default_factory=list)
    governor: GovernorKind = GovernorKind.STEP_WISE
    pid: PidConfig = field(default_factory=PidConfig)

    def __post_init__(self) -> None:
        positive(self.r_c_per_w, "r_c_per_w")
        positive(self.c_j_per_c, "c_j_per_c")
        temps = [t.temp_c for t in self.trips]
        require(temps == sorted(temps), "trips", "trip points must be in rising temperature order")


@dataclass(slots=True, frozen=True)
class BatteryConfig:
    capacity_wh: float
    initial_fraction: float = 1.0
    low_fraction: float = 0.2  # below this the battery counts as low (energy-aware policy)

    def __post_init__(self) -> None:
        positive(self.capacity_wh, "capacity_wh")
        fraction(self.initial_fraction, "initial_fraction")
        fraction(self.low_fraction, "low_fraction")


@dataclass(slots=True, frozen=True)
class LocalLlmConfig:
    """The device's own continuous-batching engine."""

    kv_capacity_tokens: int = 8192
    max_batch: int = 8

    def __post_init__(self) -> None:
        positive(self.kv_capacity_tokens, "kv_capacity_tokens")
        positive(self.max_batch, "max_batch")


@dataclass(slots=True, frozen=True)
class LlmVariant:
    """A smaller model the device can fall back to (model downgrade), with its own engine.

    It runs on ``unit`` with its own batch and KV cache. When that is the unit of the main model
    the two engines are *not* made to share it (an optimistic assumption); putting the small
    model on a second accelerator (GPU + NPU) is the case this models faithfully.
    """

    unit: str
    prefill: ServiceModelConfig
    decode_step: ServiceModelConfig
    kv_capacity_tokens: int = 8192
    max_batch: int = 8

    def __post_init__(self) -> None:
        positive(self.kv_capacity_tokens, "kv_capacity_tokens")
        positive(self.max_batch, "max_batch")


@dataclass(slots=True, frozen=True)
class DeviceProfile:
    """An edge device: units, per-stage service models, DVFS, thermal, power, battery."""

    name: str
    units: dict[str, UnitConfig]
    stages: dict[str, StageConfig]
    thermal: ThermalConfig
    description: str = ""
    sources: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    base_w: float = 0.0  # always-on power (memory, radios, board)
    dvfs: list[DvfsLevel] = field(default_factory=lambda: [DvfsLevel()])
    battery: BatteryConfig | None = None
    llm: LocalLlmConfig = field(default_factory=LocalLlmConfig)
    llm_variants: dict[str, LlmVariant] = field(default_factory=dict)  # name → smaller model

    def __post_init__(self) -> None:
        non_negative(self.base_w, "base_w")
        for vname, v in self.llm_variants.items():
            require(v.unit in self.units, f"llm_variants.{vname}.unit",
                    f"no unit {v.unit!r} (units: {', '.join(self.units)})")
        require(len(self.dvfs) > 0, "dvfs", "needs at least one level")
        for name, st in self.stages.items():
            require(name in StageName.__members__.values(), f"stages.{name}",
                    f"unknown stage (known: {', '.join(s.value for s in StageName)})")
            require(st.unit in self.units, f"stages.{name}.unit",
                    f"no unit {st.unit!r} (units: {', '.join(self.units)})")
        for s in REQUIRED_STAGES:
            require(s.value in self.stages, f"stages.{s.value}", "required stage is missing")
        for s in CPU_STAGE_NAMES:
            unit = self.stages[s.value].unit
            require(self.units[unit].kind is UnitKind.CPU, f"stages.{s.value}.unit",
                    "image decode, resize and normalize run on a CPU unit")
        require(self.stages["prefill"].unit == self.stages["decode_step"].unit,
                "stages.decode_step.unit", "prefill and decode_step must share one unit")


class Dtype(enum.StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes(self) -> float:
        return {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}[self.value]


@dataclass(slots=True, frozen=True)
class GpuConfig:
    name: str
    memory_gb: float  # GiB-agnostic: 1 GB = 1e9 bytes
    mem_bandwidth_gb_s: float
    compute_tflops: float  # dense bf16 tensor throughput
    power_w: float = 700.0

    def __post_init__(self) -> None:
        positive(self.memory_gb, "memory_gb")
        positive(self.mem_bandwidth_gb_s, "mem_bandwidth_gb_s")
        positive(self.compute_tflops, "compute_tflops")


@dataclass(slots=True, frozen=True)
class ModelShape:
    """What the roofline and KV formulas need of a decoder-only LLM."""

    name: str
    params_b: float  # billions of parameters (vision tower included)
    layers: int
    kv_heads: int
    head_dim: int
    weight_dtype: Dtype = Dtype.BF16
    kv_dtype: Dtype = Dtype.BF16

    def __post_init__(self) -> None:
        positive(self.params_b, "params_b")
        positive(self.layers, "layers")
        positive(self.kv_heads, "kv_heads")
        positive(self.head_dim, "head_dim")


@dataclass(slots=True, frozen=True)
class ServerConfig:
    gpu_memory_utilization: float = 0.9
    max_batch: int = 256
    step_overhead_s: float = 0.003  # scheduler + launch per engine step
    compute_efficiency: float = 0.5  # achieved fraction of peak FLOPs
    bandwidth_efficiency: float = 0.8  # achieved fraction of peak memory bandwidth
    preprocess_s_per_mpixel: float = 0.004  # server-side image work (fast CPUs, many of them)
    encode_s_per_image_token: float = 2e-5
    activation_reserve_gb: float = 2.0  # memory not available to KV besides weights

    def __post_init__(self) -> None:
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", "must be in (0, 1]")
        positive(self.max_batch, "max_batch")
        non_negative(self.step_overhead_s, "step_overhead_s")
        require(0 < self.compute_efficiency <= 1, "compute_efficiency", "must be in (0, 1]")
        require(0 < self.bandwidth_efficiency <= 1, "bandwidth_efficiency", "must be in (0, 1]")


@dataclass(slots=True, frozen=True)
class CloudProfile:
    name: str
    gpu: GpuConfig
    model: ModelShape
    server: ServerConfig = field(default_factory=ServerConfig)
    description: str = ""
    sources: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)


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


@dataclass(slots=True, frozen=True)
class ImageConfig:
    """Source images and the model's smart_resize rule (Qwen2-VL: 28-px factor, 2×2 merge)."""

    sizes: list[ImageSize] = field(default_factory=lambda: [ImageSize(1280, 720)])
    jpeg_bytes_per_pixel: float = 0.25
    factor: int = 28
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    pixels_per_token: int = 28 * 28

    def __post_init__(self) -> None:
        require(len(self.sizes) > 0, "sizes", "needs at least one size")
        positive(self.jpeg_bytes_per_pixel, "jpeg_bytes_per_pixel")
        positive(self.factor, "factor")
        require(self.max_pixels >= self.min_pixels, "max_pixels", "must be >= min_pixels")


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


@dataclass(slots=True, frozen=True)
class DeviceEntry:
    """Devices in a scenario: ``count`` copies of a profile, each with its own workload and link."""

    name: str
    profile: DeviceProfile
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    count: int = 1
    cloud: str | None = None  # server to offload to; None: the first one

    def __post_init__(self) -> None:
        positive(self.count, "count")


@dataclass(slots=True, frozen=True)
class CloudEntry:
    name: str
    profile: CloudProfile
    replicas: int = 1

    def __post_init__(self) -> None:
        positive(self.replicas, "replicas")


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


# ---- loading ------------------------------------------------------------------------------


def resolve_profile_path(ref: str, base_dir: Path | None) -> Path:
    """A profile reference is a path (relative to the scenario) or a name in models/profiles/."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        return p
    return PROFILE_DIR / f"{ref}.yaml"


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
            if isinstance(entry, dict) and "profile_set" in entry:  # tweaks of a named profile
                tweaks = entry.pop("profile_set")
                if not isinstance(tweaks, dict) or not isinstance(entry.get("profile"), dict):
                    raise ConfigError(f"scenario.{section}[{i}].profile_set: expected a mapping "
                                      "of KEY.PATH: VALUE next to a profile")
                for key, value in tweaks.items():
                    set_path(entry["profile"], str(key), value)
    return raw


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


def load_scenario(path: str | Path | None = None,
                  overrides: list[tuple[str, Any]] | None = None) -> Scenario:
    """Load a scenario YAML (``None``: the built-in default) with optional overrides."""
    p = Path(path) if path is not None else SCENARIO_DIR / "default.yaml"
    if path is not None and not p.exists() and (SCENARIO_DIR / f"{path}.yaml").exists():
        p = SCENARIO_DIR / f"{path}.yaml"  # a built-in scenario by name
    return scenario_from_raw(load_yaml(p), p.parent, overrides)


def load_device_profile(ref: str | Path) -> DeviceProfile:
    p = resolve_profile_path(str(ref), None)
    return build(DeviceProfile, load_yaml(p), f"profile {p.stem}")


def load_cloud_profile(ref: str | Path) -> CloudProfile:
    p = resolve_profile_path(str(ref), None)
    return build(CloudProfile, load_yaml(p), f"profile {p.stem}")


__all__ = ["ConfigError", "Scenario", "load_scenario"]
