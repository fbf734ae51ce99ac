"""The one request-lifecycle record shared by the runtime, the simulator and the UI.

A VLM request walks through a pipeline of stages. On a real server (``edgeserve serve``):

    arrived ─▶ preproc queued ─▶ [worker] decode ─▶ resize ─▶ normalize/patchify (─▶ encode)
            ─▶ engine queued ─▶ first token ─▶ … tokens … ─▶ finished | failed

and in the simulator an offloaded request adds an uplink before the cloud server's queue and a
downlink after its last token. Every stage boundary is a timestamp in seconds on **one clock per
host** (``CLOCK_MONOTONIC``, i.e. :func:`time.monotonic`, which is shared by all processes of a
Linux host; the simulator uses simulated seconds from 0). The trace header carries the offset to
wall-clock time so that traces can be aligned with other logs.

A trace file is JSON Lines: a :class:`TraceHeader` first, then any mix of :class:`RequestRecord`,
:class:`ResourceSample`, :class:`DeviceSample`, :class:`EngineStep` and :class:`MigrationDecision`,
each tagged by its ``type`` field (``step`` and ``migration`` records, and the optional thermal
network fields of a device sample, were added within schema 1: older traces simply have none). The runtime
writes it (``--trace``), the simulator writes the same schema, the UI and the calibrator read only
these records. A *stall* is measurable from them: engine idle time while an admitted request sat in
a CPU stage (see :func:`edgeserve.records.stage_spans`).

This module depends on msgspec alone so that ``sim`` and ``tui`` can import it without pulling in
any of the runtime.
"""

from __future__ import annotations

import enum
import io
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

SCHEMA_VERSION = 1


class Outcome(enum.StrEnum):
    """How a request ended."""

    OK = "ok"  # all requested tokens generated
    FAILED = "failed"  # an error after admission (bad image, worker died, engine error)
    REJECTED = "rejected"  # refused at admission (queue full → 429, invalid request → 400)
    ABORTED = "aborted"  # the client went away; the engine was told to stop
    DROPPED = "dropped"  # simulator: a policy dropped the frame (deadline would be missed)


class Stage(enum.StrEnum):
    """Named spans of a request, in pipeline order. Used for plots, metrics and waterfalls."""

    PREPROC_QUEUE = "preproc_queue"  # admitted, waiting for a free worker
    DECODE = "decode"  # image bytes → pixels (CPU)
    RESIZE = "resize"  # smart_resize to the model's grid (CPU)
    NORMALIZE = "normalize"  # color, rescale, normalize, patchify (CPU)
    ENCODE = "encode"  # vision encoder (NPU/GPU/ONNX), optional
    HANDOFF = "handoff"  # worker done → request queued in the engine
    UPLINK = "uplink"  # simulator: request bytes to a cloud server
    ENGINE_QUEUE = "engine_queue"  # queued in the engine until the first token
    DECODE_TOKENS = "generate"  # first token → last token
    DOWNLINK = "downlink"  # simulator: answer back from a cloud server


# Stages whose time, with the engine idle, is a stall: work that waits upstream of the engine.
# ENCODE is one: the runtime's encoder (--encoder onnx) runs in the preprocessing workers, and
# the frontend's live stall meter already counts a whole worker job, encode included; on a
# simulated NPU the engine waiting for the encoder is the same lost capacity.
CPU_STAGES = frozenset({Stage.PREPROC_QUEUE, Stage.DECODE, Stage.RESIZE, Stage.NORMALIZE,
                        Stage.ENCODE})


class TraceHeader(msgspec.Struct, kw_only=True, tag="header", tag_field="type"):
    """First line of every trace file."""

    schema: int = SCHEMA_VERSION
    producer: str  # "edgeserve serve", "edgeserve sim", …
    clock: str = "monotonic"  # "monotonic" (runtime) or "sim" (simulated seconds from 0)
    wall_offset_s: float = 0.0  # wall-clock time = t + wall_offset_s
    meta: dict[str, object] = msgspec.field(default_factory=dict)


class RequestRecord(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False, tag="request",
                    tag_field="type"):
    """One request's sizes and stage timestamps (seconds on the trace's clock).

    Timestamps that a request never reached stay ``None``. ``preproc_start_s`` is when a worker
    took the image (decode starts); ``decode_end_s``, ``resize_end_s`` and ``normalize_end_s`` close
    the worker's CPU stages; ``encode_end_s`` closes the optional vision-encoder stage;
    ``preproc_end_s`` is when the frontend had the arrays back.

    ``gc=False``: records are plain data (strings, numbers, a list of floats), so the cyclic
    garbage collector never tracks them — cheaper to allocate and free by the million. A record
    must therefore never hold a reference that leads back to itself.
    """

    id: str
    outcome: Outcome = Outcome.OK
    error: str | None = None  # reason for a non-OK outcome, for people
    # where it ran
    device: str | None = None  # simulator device, or the runtime host
    placement: str | None = None  # "local", "cloud:<server>", … ; gateway: also "cache", "drop"
    decision_reason: str | None = None
    # gateway (``edgeserve gateway``): the model asked of the target, the image scale a policy
    # chose, the targets tried in order ("cloud:a", "cloud:b", "local:x"), and the device state the
    # decision saw (temperature and where it came from: "host", "virtual" or "none"; the local
    # queue, the battery's charge as a fraction where there is one)
    model: str | None = None
    resolution_scale: float = 1.0
    attempts: list[str] = msgspec.field(default_factory=list)
    decision_temp_c: float | None = None
    sensor_source: str | None = None
    predicted_local_s: float | None = None
    predicted_cloud_s: float | None = None
    decision_queue: int | None = None
    decision_battery: float | None = None
    # gateway: the cloud link the decision saw, as measured (probe round trip, upload rate); a
    # replay simulates that link
    link_rtt_s: float | None = None
    link_uplink_mbps: float | None = None
    worker: int | None = None  # preprocessing worker (runtime) or CPU core (simulator)
    # runtime: times an image of this request was preprocessed again because the worker holding
    # it died (SIGKILL, OOM); the stage timestamps are the last attempt's, and the time lost to
    # the dead attempt counts as preproc_queue
    preproc_retries: int = 0
    # sizes
    image_bytes: int = 0
    num_images: int = 0
    source_width: int = 0
    source_height: int = 0
    # pixels actually decoded (JPEGs may decode at 1/2…1/8 scale in the DCT domain); 0: unknown
    decoded_pixels: int = 0
    target_width: int = 0
    target_height: int = 0
    image_tokens: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int = 0
    # the prompt's shared prefix (a system prompt, few-shot examples): an id naming it and its
    # length in tokens; a replay hands them to the simulator's prefix caches. ``cached_tokens``:
    # prompt tokens found in a prefix cache (not computed by the prefill)
    prefix_id: str | None = None
    prefix_tokens: int = 0
    cached_tokens: int = 0
    # timestamps
    arrived_s: float
    preproc_queued_s: float | None = None
    preproc_start_s: float | None = None
    decode_end_s: float | None = None
    resize_end_s: float | None = None
    normalize_end_s: float | None = None
    encode_end_s: float | None = None
    preproc_end_s: float | None = None
    uplink_end_s: float | None = None
    engine_queued_s: float | None = None
    first_token_s: float | None = None
    token_times_s: list[float] = msgspec.field(default_factory=list)
    last_token_s: float | None = None
    finished_s: float | None = None
    deadline_s: float | None = None  # simulator: per-frame deadline, absolute

    # ---- derived quantities -------------------------------------------------------------
    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrived_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.arrived_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.first_token_s is None or self.last_token_s is None or self.output_tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)

    def itl_s(self) -> list[float]:
        """Inter-token latencies from ``token_times_s``."""
        t = self.token_times_s
        return [b - a for a, b in itertools.pairwise(t)]


def stage_spans(rec: RequestRecord) -> list[tuple[Stage, float, float]]:
    """The request's stages as ``(stage, start_s, end_s)``, in order, skipping unreached ones."""
    r = rec
    offloaded = r.uplink_end_s is not None
    cpu_done = r.encode_end_s if r.encode_end_s is not None else r.normalize_end_s
    points: list[tuple[Stage, float | None, float | None]] = [
        (Stage.PREPROC_QUEUE, r.preproc_queued_s, r.preproc_start_s),
        (Stage.DECODE, r.preproc_start_s, r.decode_end_s),
        (Stage.RESIZE, r.decode_end_s, r.resize_end_s),
        (Stage.NORMALIZE, r.resize_end_s, r.normalize_end_s),
        (Stage.ENCODE, r.normalize_end_s, r.encode_end_s),
    ]
    if offloaded:
        up_start = r.preproc_end_s if r.preproc_end_s is not None else r.arrived_s
        points += [
            (Stage.UPLINK, up_start, r.uplink_end_s),
            (Stage.ENGINE_QUEUE, r.engine_queued_s, r.first_token_s),
            (Stage.DECODE_TOKENS, r.first_token_s, r.last_token_s),
            (Stage.DOWNLINK, r.last_token_s, r.finished_s),
        ]
    else:
        points += [
            (Stage.HANDOFF, cpu_done, r.engine_queued_s),
            (Stage.ENGINE_QUEUE, r.engine_queued_s, r.first_token_s),
            (Stage.DECODE_TOKENS, r.first_token_s, r.last_token_s),
        ]
    return [(s, a, b) for s, a, b in points if a is not None and b is not None and b >= a]


class ResourceSample(msgspec.Struct, kw_only=True, omit_defaults=True, tag="sample", tag_field="type"):
    """A periodic snapshot of the runtime's resources and queues."""

    t_s: float
    preproc_queue: int = 0  # admitted requests waiting for a worker
    preproc_running: int = 0  # requests inside a worker
    engine_waiting: int = 0  # vLLM scheduler's waiting queue
    engine_running: int = 0  # vLLM scheduler's running batch
    engine_busy: float = 0.0  # fraction of the interval the engine stepped
    stall_s: float = 0.0  # engine idle while work sat in CPU stages, this interval
    worker_busy: list[float] = msgspec.field(default_factory=list)  # fraction per worker
    worker_stage: list[str] = msgspec.field(default_factory=list)  # current stage per worker
    process_cpu: dict[str, float] = msgspec.field(default_factory=dict)  # percent of one core
    process_rss_bytes: dict[str, int] = msgspec.field(default_factory=dict)
    system_cpu_percent: float = 0.0
    system_mem_percent: float = 0.0
    gpu_util: list[float] = msgspec.field(default_factory=list)  # NVML, where present
    gpu_mem_bytes: list[int] = msgspec.field(default_factory=list)
    # runtime: when, within this sample's settled window, the engine stepped (nearby steps merged)
    # and when it stalled (idle while an admitted request sat in a CPU stage)
    engine_busy_spans: list[tuple[float, float]] = msgspec.field(default_factory=list)
    stall_spans: list[tuple[float, float]] = msgspec.field(default_factory=list)


class UnitClockSample(msgspec.Struct, kw_only=True, gc=False):
    """One compute unit's (a CPU cluster, the GPU, the NPU) DVFS clock at a device sample."""

    unit: str
    level: int  # 0 = fastest
    scale: float  # service-time stretch of that level, 1.0 = nominal


class DeviceSample(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False, tag="device",
                   tag_field="type"):
    """A periodic snapshot of one simulated edge device.

    A device whose profile has a thermal network (junction and skin nodes, a clock per unit) also
    carries ``skin_temp_c`` and ``units``; ``temp_c`` is then the junction (die) temperature and
    ``clock_level``/``clock_scale`` those of the unit that runs the language model.
    """

    t_s: float
    device: str
    temp_c: float
    clock_level: int  # DVFS level index, 0 = fastest
    clock_scale: float  # service-time stretch of that level, 1.0 = nominal
    power_w: float
    battery_wh: float | None = None
    queue: int = 0  # requests waiting on the device
    running: int = 0
    offload_share: float = 0.0  # fraction of decisions so far sent to the cloud
    throttled: bool = False
    skin_temp_c: float | None = None
    units: list[UnitClockSample] = msgspec.field(default_factory=list)


class MigrationDecision(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False,
                        tag="migration", tag_field="type"):
    """A stage (``image`` preprocessing or ``encode``) moved between two units of a device.

    A simulated device moves its vision encoder off a hot NPU (or image preprocessing off a hot
    big CPU cluster) and back once it cools; like an offload decision on a request's record, each
    move says why. Levels are the units' clock levels when it was decided; efficiencies the units'
    work per joule at them (``None`` where the profile gives none).
    """

    t_s: float
    device: str
    stage: str
    from_unit: str
    to_unit: str
    reason: str
    from_level: int = 0
    to_level: int = 0
    from_efficiency: float | None = None
    to_efficiency: float | None = None


class EngineStep(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False, tag="step",
                 tag_field="type"):
    """One step (iteration) of the LLM engine, as its scheduler reported it.

    vLLM V1 runs the engine in steps: each holds one decode token for every running request past
    its prefill plus prefill chunks of others, under a token budget. ``t_s`` is when the step's
    output reached the frontend (its end, on the trace's clock); ``duration_s`` the step's own
    time. "Prefill" counts requests that have no output token yet (a chunk of a long prompt
    included); ``encoder_tokens`` the vision-encoder output tokens computed inside the step. The
    calibrator fits the simulator's step-time model from these records.
    """

    t_s: float
    duration_s: float
    prefill_requests: int = 0
    prefill_tokens: int = 0
    decode_requests: int = 0
    decode_tokens: int = 0
    encoder_inputs: int = 0
    encoder_tokens: int = 0
    running: int = 0  # the scheduler's running set after the step
    waiting: int = 0
    kv_cache_usage: float = 0.0  # fraction of KV blocks in use
    # where the span is the engine core's interval (step_timing "engine_interval"): the interval
    # since the previous step's output reached the frontend, which also holds the frontend's pacing
    output_interval_s: float | None = None
    # image requests handed to the engine while this step ran: the runtime does not write it, the
    # calibrator counts it from the request records (sim.fit.step_fit.image_arrivals)
    image_arrivals: int = 0


TraceItem = (TraceHeader | RequestRecord | ResourceSample | DeviceSample | EngineStep
             | MigrationDecision)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TraceItem)


def encode(item: TraceItem) -> bytes:
    """One JSON line (with trailing newline)."""
    return _encoder.encode(item) + b"\n"


def decode(line: bytes | str) -> TraceItem:
    return _decoder.decode(line)


class TraceWriter:
    """Appends records to a JSON Lines file, streaming: nothing is held in memory.

    Writes go through a buffered file; ``flush()`` is called by the owner at a cadence it chooses
    (the runtime flushes on every resource sample so a live tail sees records within a second).
    """

    def __init__(self, path: str | os.PathLike[str], header: TraceHeader) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[bytes] = open(self.path, "wb", buffering=1 << 20)  # noqa: SIM115
        self.count = 0
        self.write(header)

    def write(self, item: TraceItem) -> None:
        self._f.write(_encoder.encode(item))
        self._f.write(b"\n")
        self.count += 1

    def write_many(self, items: list[TraceItem]) -> None:
        """Append many records at once (one msgspec call; what the simulator uses)."""
        if items:
            self._f.write(_encoder.encode_lines(items))
            self.count += len(items)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TraceError(ValueError):
    """A trace file that cannot be read: wrong schema version, or a malformed line."""


def read_trace(path: str | os.PathLike[str] | IO[bytes]) -> Iterator[TraceItem]:
    """Yield the items of a trace file, header first, streaming line by line.

    Raises :class:`TraceError` naming the line for a malformed line or an unknown schema version.
    """
    f: IO[bytes] = path if isinstance(path, io.IOBase) else open(path, "rb")  # type: ignore[assignment,arg-type]  # noqa: SIM115
    try:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                item = _decoder.decode(line)
            except msgspec.DecodeError as e:
                raise TraceError(f"{getattr(f, 'name', 'trace')}:{lineno}: {e}") from None
            if isinstance(item, TraceHeader) and item.schema != SCHEMA_VERSION:
                raise TraceError(
                    f"{getattr(f, 'name', 'trace')}: schema version {item.schema}, "
                    f"this edgeserve reads version {SCHEMA_VERSION}"
                )
            yield item
    finally:
        if f is not path:
            f.close()
