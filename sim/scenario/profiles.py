"""Hardware profiles: edge devices and cloud LLM servers, as typed, validated dataclasses.

A :class:`DeviceProfile` describes an edge device — compute units with idle/active power,
per-stage service-time models, DVFS levels, a thermal RC node with trip points and a governor,
an optional battery, its LLM engine and smaller fallback models. A :class:`CloudProfile` describes
one GPU server replica — the GPU, the model's shape and dtypes, and serving knobs — from which
:mod:`sim.core.cloud` derives KV capacity and roofline step times. Profiles are YAML files in
``models/profiles/``; each lists its ``sources`` and, separately, what is ``assumed``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sim.scenario.fitted_range import FittedRange
from sim.scenario.schema import fraction, non_negative, positive, require
from sim.scenario.thermal_network_config import ThermalNetworkConfig
from sim.scenario.uncertainty import ProfileUncertainty

#: Request features a service-time model may depend on (linear coefficients in ``per``).
FEATURES = (
    "source_pixels",  # image pixels of the original (width × height)
    "target_pixels",  # pixels after smart_resize
    "image_tokens",  # vision tokens after the 2×2 merge
    "prompt_tokens",  # whole prompt, image tokens included
    "output_tokens",
    "decoded_pixels",  # pixels the decoder produces (JPEG: 1/2…1/8 scale in the DCT domain)
    "batch",  # decode step: requests in the running batch
    "context_tokens",  # decode step: KV tokens of the whole batch
    "image_tokens_sq",  # image tokens squared (a vision encoder attends over all of an image's)
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


#: What one vLLM V1 engine step's time depends on (linear coefficients in ``StepTimeModel.per``).
STEP_FEATURES = (
    "prefill_tokens",  # prompt tokens computed in the step (chunks; cached prefixes not counted)
    "decode_tokens",  # requests past their prefill: one token each
    "context_tokens",  # KV tokens the step's requests hold after it (what attention reads)
    "encoder_tokens",  # image tokens encoded inside the step (no separate encoder unit)
    "encoder_tokens_sq",  # Σ image tokens² of those images (attention over each image)
    # (Σ image tokens)² − Σ image tokens²: what a step costs beyond its images encoded one by one
    # when it encodes several (vLLM's CPU tower: 1.1–1.3 × the single images' sum, measured)
    "encoder_tokens_cross",
    # prefill_tokens × (context_tokens − prefill_tokens): a step's prompt tokens against the context
    # the others hold. vLLM's CPU backend attends a prefill over the whole batch's keys, so a
    # prefill beside decoders costs more with their context (a 1230-token image step: 280 ms beside
    # no decoder, 305–310 ms beside 12–16 holding 14–19 k tokens; a 221-token one +3 ms), while a
    # decode-only step's time hardly grows with context (1.8–2.2 ms at 1 k or 2 k tokens)
    "prefill_x_context",
    # image requests handed to the engine while the step runs: vLLM's EngineCore takes each new
    # request (its pixel tensors) in on the CPU beside its step loop, and on an H100 a step grew by
    # ~19 ms per image request arriving during it (2026-12-07; docs/sim.md). Priced when the
    # request arrives, by lengthening the running step (or the next one, when none runs)
    "image_arrivals",
    # 1 for a step that computes prompt tokens: on a GPU vLLM replays a decode-only batch as one
    # CUDA graph and runs a batch holding a prefill piecewise, its attention launched eagerly —
    # on an H100 such a step cost ~3.5 ms more (2026-12-07 calibration; docs/sim.md)
    "prefill_step",
    # the decoders of a step that also computes prompt tokens: the eager attention's per-request
    # work, which a decode-only step's graph does not pay (0.14 ms per sequence on that H100)
    "decode_beside_prefill",
)


@dataclass(slots=True, frozen=True)
class StepTimeModel:
    """A vLLM V1 engine, step by step (:mod:`sim.core.step_engine`): its scheduler limits and step time.

    One step takes ``base_s + Σ per[f] · f`` seconds at clock scale 1 (features
    :data:`STEP_FEATURES`), times a lognormal factor of mean 1 and coefficient of variation ``cv``
    (0: deterministic). ``edgeserve calibrate`` fits the coefficients from the real engine's
    per-step records and takes the limits from its configuration.

    ``drift_sd``/``drift_tau_s`` (both 0: off) add the machine's slow *drift*: every step is also
    multiplied by ``exp(x(t) − drift_sd²/2)`` (mean 1), ``x`` an Ornstein–Uhlenbeck process of
    stationary standard deviation ``drift_sd`` and correlation time ``drift_tau_s`` — a shared
    machine runs fast and slow for seconds at a time, and steps that are slow together make
    queues that independent noise does not. ``cold_shape_factor``: a step holding a prefill-token
    count or an image size the engine has not run before takes ``1 + cold_shape_factor`` times as
    long (kernels built per shape on a fresh server).
    """

    base_s: float = 0.0
    per: dict[str, float] = field(default_factory=dict)
    cv: float = 0.0
    max_num_batched_tokens: int = 2048  # token budget of one step
    max_num_seqs: int = 16  # requests running at once (edgeserve's engine default)
    block_size_tokens: int = 128  # KV block (vLLM's CPU backend)
    drift_sd: float = 0.0  # stationary sd of the log slowdown shared by nearby steps
    drift_tau_s: float = 0.0  # its correlation time
    drift_start: float = 0.0  # the log slowdown a fresh server starts at (0: a stationary draw)
    cold_shape_factor: float = 0.0  # extra time of a step holding a shape the engine runs first

    def __post_init__(self) -> None:
        non_negative(self.base_s, "base_s")
        for k, v in self.per.items():
            require(k in STEP_FEATURES, f"per.{k}",
                    f"unknown feature (known: {', '.join(STEP_FEATURES)})")
            non_negative(v, f"per.{k}")
        non_negative(self.cv, "cv")
        non_negative(self.cold_shape_factor, "cold_shape_factor")
        non_negative(self.drift_sd, "drift_sd")
        non_negative(self.drift_tau_s, "drift_tau_s")
        require(self.drift_start == 0 or self.drift_sd > 0, "drift_start",
                "needs the drift on (drift_sd and drift_tau_s > 0)")
        require((self.drift_sd > 0) == (self.drift_tau_s > 0), "drift_tau_s",
                f"give drift_sd and drift_tau_s both positive (drift on) or both 0, got "
                f"drift_sd={self.drift_sd}, drift_tau_s={self.drift_tau_s}")
        positive(self.max_num_batched_tokens, "max_num_batched_tokens")
        positive(self.max_num_seqs, "max_num_seqs")
        positive(self.block_size_tokens, "block_size_tokens")
        require(self.max_num_batched_tokens >= self.max_num_seqs, "max_num_batched_tokens",
                f"must be >= max_num_seqs ({self.max_num_seqs}): every running request's decode "
                f"token must fit in a step, got {self.max_num_batched_tokens}")


@dataclass(slots=True, frozen=True)
class LocalLlmConfig:
    """The device's own engine.

    Without ``step`` it is a :class:`~sim.core.batching.BatchEngine` priced by the ``prefill`` and
    ``decode_step`` stage models, at most ``max_batch`` requests at once. With ``step`` it is a
    :class:`~sim.core.step_engine.StepEngine` (vLLM V1 steps); then ``step.max_num_seqs`` caps the
    running set and ``max_batch`` and the two stage models are not used by the engine.
    """

    kv_capacity_tokens: int = 8192
    max_batch: int = 8
    step: StepTimeModel | None = None
    # from the end of preprocessing until the runtime hands the request to vLLM: the shared-
    # memory hand-off and the frontend's prompt building (a fixed delay)
    handoff_s: float = 0.0
    # vLLM's input processing after that (its multimodal processor on the resized image, the
    # hand-over to the engine core): the request is queued but cannot be scheduled yet. A
    # service model on the request's features (``edgeserve calibrate`` fits base + per target
    # pixel); its mean is used. None: none.
    input_processing: ServiceModelConfig | None = None

    def __post_init__(self) -> None:
        positive(self.kv_capacity_tokens, "kv_capacity_tokens")
        positive(self.max_batch, "max_batch")
        non_negative(self.handoff_s, "handoff_s")
        if self.step is not None:
            require(self.kv_capacity_tokens >= self.step.block_size_tokens, "kv_capacity_tokens",
                    f"must hold at least one KV block ({self.step.block_size_tokens} tokens), "
                    f"got {self.kv_capacity_tokens}")


@dataclass(slots=True, frozen=True)
class HostConfig:
    """The host's cores, shared by the preprocessing workers and the engine (``host:``).

    On a CPU-only server the preprocessing workers (the ``cpu`` unit's stages) and the engine's
    OMP threads run on the same few cores, so each slows the other down. With this section the
    device approximates processor sharing: a service started while ``demand`` threads want the
    cores runs ``max(1, demand / cores)`` times longer (:mod:`sim.core.device`).
    """

    cores: int  # cores shared by the preprocessing workers and the engine
    engine_threads: int  # threads one engine step keeps busy
    # measured: each second of an engine step during which a worker is busy adds this many
    # seconds to the step (caches, memory bandwidth and OS scheduling cost more than the cores'
    # share alone says; ``edgeserve calibrate`` fits it)
    step_extra_s_per_worker_s: float = 0.0
    # the same for the workers beyond :attr:`free_cores`, which take cores from the engine's
    # threads (None: ``step_extra_s_per_worker_s``). Measured on a 2-core Zen 4 with one engine
    # thread: a decode step beside one busy worker 1.17 × its quiet time, beside two 2.2 ×
    step_extra_s_per_oversubscribed_worker_s: float | None = None
    # measured: the threads' worth of the cores a running step takes from a worker beside it
    # (None: engine_threads, an even share). On one core shared by a worker and vLLM's CPU
    # engine a worker ran at a quarter of its speed inside steps, not half (edgeserve calibrate
    # fits it: sim.fit.host_effects.fit_engine_demand)
    engine_demand_threads: float | None = None

    def __post_init__(self) -> None:
        positive(self.cores, "cores")
        positive(self.engine_threads, "engine_threads")
        if self.engine_demand_threads is not None:
            non_negative(self.engine_demand_threads, "engine_demand_threads")
        non_negative(self.step_extra_s_per_worker_s, "step_extra_s_per_worker_s")
        if self.step_extra_s_per_oversubscribed_worker_s is not None:
            non_negative(self.step_extra_s_per_oversubscribed_worker_s,
                         "step_extra_s_per_oversubscribed_worker_s")

    @property
    def free_cores(self) -> int:
        """Busy workers that run beside an engine step before they take its cores."""
        return free_cores(self.cores, self.engine_threads)

    @property
    def in_step_demand(self) -> float:
        """The engine's threads' worth of demand on the cores while a step runs."""
        d = self.engine_demand_threads
        return float(self.engine_threads) if d is None else d

    @property
    def kappa_over(self) -> float:
        """Step seconds per second of a worker beyond :attr:`free_cores`."""
        k = self.step_extra_s_per_oversubscribed_worker_s
        return self.step_extra_s_per_worker_s if k is None else k


def free_cores(cores: int, engine_threads: int) -> int:
    """The cores ``engine_threads`` leave to the preprocessing workers of a ``cores``-core
    host, at least one: an engine allowed on every core may compute on fewer (vLLM's CPU build
    ran one torch thread on the 2-core development host, the rest of its cores left free)."""
    return max(1, cores - engine_threads)


@dataclass(slots=True, frozen=True)
class AdmissionConfig:
    """The runtime's admission limits (``admission:``; ``edgeserve serve``'s flags of these names).

    A request takes an *engine slot* before preprocessing and gives it back at its first token
    (or when it ends); with all ``max_engine_queue`` slots taken, requests wait in arrival order in
    front of preprocessing. A request arriving when ``max_inflight`` requests are admitted, or
    when every slot is taken and ``max_pending`` already wait for one (or ``max_pending`` wait for
    a preprocessing worker), is rejected (HTTP 429).
    """

    max_pending: int = 64  # requests waiting in front of preprocessing; beyond → rejected
    max_inflight: int = 256  # admitted requests in total; beyond → rejected
    max_engine_queue: int | None = None  # slots; None: 2 × the engine's max_num_seqs (max_batch)

    def __post_init__(self) -> None:
        positive(self.max_pending, "max_pending")
        positive(self.max_inflight, "max_inflight")
        if self.max_engine_queue is not None:
            positive(self.max_engine_queue, "max_engine_queue")


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
    # the single RC node; a profile with thermal_network may leave it out (then unused)
    thermal: ThermalConfig = field(default_factory=lambda: ThermalConfig(1.0, 1.0))
    description: str = ""
    sources: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    base_w: float = 0.0  # always-on power (memory, radios, board)
    dvfs: list[DvfsLevel] = field(default_factory=lambda: [DvfsLevel()])
    battery: BatteryConfig | None = None
    llm: LocalLlmConfig = field(default_factory=LocalLlmConfig)
    llm_variants: dict[str, LlmVariant] = field(default_factory=dict)  # name → smaller model
    host: HostConfig | None = None  # cores shared by the cpu stages and the engine (None: not)
    admission: AdmissionConfig | None = None  # the runtime's admission limits (None: none)
    # the sizes a calibrated profile was fitted on (``edgeserve calibrate`` writes it; None:
    # not calibrated, or calibrated before it was recorded)
    fitted_range: FittedRange | None = None
    # junction and skin nodes with per-unit clocks and governors (None: the single node above)
    thermal_network: ThermalNetworkConfig | None = None
    # how sure the calibration is (``edgeserve calibrate`` writes it; None: not recorded)
    uncertainty: ProfileUncertainty | None = None

    def __post_init__(self) -> None:
        non_negative(self.base_w, "base_w")
        if self.thermal_network is not None:
            tn = self.thermal_network
            for u in tn.clocks:
                require(u in self.units, f"thermal_network.clocks.{u}",
                        f"no unit {u!r} (units: {', '.join(self.units)})")
            for i, g in enumerate(tn.governors):
                for u in g.units:
                    require(u in self.units, f"thermal_network.governors[{i}].units",
                            f"no unit {u!r} (units: {', '.join(self.units)})")
            for i, m in enumerate(tn.migrations):
                for u in m.units:
                    require(u in self.units, f"thermal_network.migrations[{i}].units",
                            f"no unit {u!r} (units: {', '.join(self.units)})")
                image = m.stage == "image"
                st = self.stages.get("image_decode" if image else m.stage)
                require(st is not None and st.unit == m.units[0],
                        f"thermal_network.migrations[{i}].units",
                        f"the first unit must be the {m.stage} stage's own unit")
                require(self.units[m.units[0]].count == self.units[m.units[1]].count,
                        f"thermal_network.migrations[{i}].units",
                        "both units need the same number of servers")
                cpu = [self.units[u].kind is UnitKind.CPU for u in m.units]
                require(all(cpu) if image else not any(cpu),
                        f"thermal_network.migrations[{i}].units",
                        "image stages move between CPU clusters" if image else
                        "the encoder moves between accelerators (an encoder on the CPU runs in "
                        "the preprocessing worker)")
        require(self.host is None or self.llm.step is not None, "host",
                "shared cores are modelled for the vLLM V1 step engine only: the profile needs "
                "llm.step")
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
    # replicas as vLLM V1 step engines with this time model (None: the roofline BatchEngine);
    # KV capacity still follows from memory, step.max_num_seqs replaces max_batch
    step: StepTimeModel | None = None

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
