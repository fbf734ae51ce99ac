"""Configuration of ``edgeserve serve``: one validated object, built from flags or a file.

:class:`ServeConfig` holds everything the server needs; :class:`EngineOptions` is the part passed
through to vLLM's engine. Both validate themselves on construction, so a bad value fails at start
with a message that names the field, never deep inside a worker or the engine.

A config file (YAML or JSON) has the same field names; the engine options sit under ``engine``::

    model: models/tiny-qwen2-vl
    workers: 2
    mode: split
    allowed_media_dir: /data/images
    engine:
      max_model_len: 4096
      max_num_seqs: 8
      kv_cache_memory_bytes: 268435456   # optional: the default sizes it from the model
    encoder: onnx                        # optional (default auto): the tower on ONNX Runtime
    encoder_provider: OpenVINO
    encoder_provider_options: {device_type: NPU}

Flags given on the command line override the file.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeserve.engine_wait import EngineWait
from mm_preproc.spec import QWEN2_VL, PreprocSpec, SpecError, read_spec

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "tiny-qwen2-vl"


class ConfigError(ValueError):
    """A configuration value a user gave that cannot work; the message says which and why."""


class PreprocMode(enum.StrEnum):
    """Where image preprocessing runs."""

    SPLIT = "split"  # in worker processes, apart from the frontend and the engine
    INLINE = "inline"  # on the frontend's event loop (the comparison baseline)


class EncoderKind(enum.StrEnum):
    """Where the vision encoder (the model's vision tower) runs."""

    AUTO = "auto"  # chosen from the machine at start (edgeserve.auto_defaults)
    NONE = "none"  # inside the vLLM engine, as vLLM runs it
    ONNX = "onnx"  # on ONNX Runtime in the preprocessing stage; vLLM gets image embeddings


class EngineCorePlacement(enum.StrEnum):
    """Which cores vLLM's EngineCore process may run on (see :mod:`edgeserve.placement`)."""

    WITH_WORKER = "with-worker"  # its model worker's cores, where those are a narrower set
    ANY = "any"  # wherever vLLM left it (all the server's cores)


ENCODER_SUBDIR = "onnx"  # where `edgeserve models export-encoder` writes a model's graph


def default_workers(encoder_on_cpu: bool = False) -> int:
    """How many preprocessing workers a server gets when ``workers`` is not given.

    One worker per core, leaving one core to the frontend and one to the engine: cores − 2, at
    least 1. When the workers also run the vision encoder on the CPU (``--encoder onnx`` with a
    CPU provider) the engine no longer runs the tower, its work per image falls about eightfold
    and the workers' grows by the tower's: the engine and the frontend then share one core,
    cores − 1 workers, and at least 2 where there are two cores, so that the slowest stage can
    use both (on 2 cores, 12 MP photos at 1280 tokens: docs/runtime.md, "How many workers when they encode").
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if encoder_on_cpu:
        return max(min(2, cores), cores - 1)
    return max(1, cores - 2)


@dataclass(slots=True, frozen=True)
class EngineOptions:
    """vLLM engine options passed through to ``AsyncEngineArgs``.

    KV-cache memory: with neither ``gpu_memory_utilization`` nor ``kv_cache_memory_bytes`` given,
    vLLM's CPU build gets a KV cache sized from the model and the NUMA node
    (:mod:`edgeserve.engine_memory`: ``max_num_seqs × max_model_len`` tokens, capped by the
    node's free memory), and the GPU build keeps vLLM's own default fraction. Either field, when
    set, is passed to vLLM as it is (on the CPU build the fraction is of the NUMA node's memory,
    minus the engine worker's RSS). ``extra`` carries any other ``AsyncEngineArgs`` field by name;
    ``mm_processor_cache_gb`` there overrides edgeserve's cap on vLLM's multimodal cache.
    """

    max_model_len: int = 4096
    max_num_seqs: int = 16
    gpu_memory_utilization: float | None = None  # None: sized by edgeserve (CPU) or vLLM (GPU)
    kv_cache_memory_bytes: int | None = None  # a fixed KV-cache size instead of the fraction
    dtype: str | None = None  # None: chosen from the machine at start (edgeserve.auto_defaults)
    enforce_eager: bool = False
    seed: int = 0
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1  # GPUs one engine spreads its model over (vLLM's TP)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_model_len < 16:
            raise ConfigError(f"engine.max_model_len must be >= 16, got {self.max_model_len}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"engine.max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ConfigError("engine.tensor_parallel_size must be an integer >= 1, "
                              f"got {self.tensor_parallel_size!r}")
        g = self.gpu_memory_utilization
        if g is not None and not 0.0 < g <= 1.0:
            raise ConfigError(f"engine.gpu_memory_utilization must be in (0, 1], got {g}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 1:
            raise ConfigError("engine.kv_cache_memory_bytes must be >= 1, "
                              f"got {self.kv_cache_memory_bytes}")
        if self.dtype is not None and (not isinstance(self.dtype, str) or not self.dtype):
            raise ConfigError(f"engine.dtype must be a dtype name such as bfloat16, float32 or "
                              f"auto (the checkpoint's), got {self.dtype!r}")

    def replace(self, **changes: Any) -> EngineOptions:
        return dataclasses.replace(self, **changes)

    @property
    def keeps_mm_cache(self) -> bool:
        """Whether the user asked for vLLM's multimodal processor cache (``--engine-arg
        mm_processor_cache_gb`` above 0), which several render threads cannot share."""
        cache = self.extra.get("mm_processor_cache_gb")
        return isinstance(cache, int | float) and cache > 0


@dataclass(slots=True, frozen=True)
class ServeConfig:
    """Everything ``edgeserve serve`` needs, validated on construction.

    Image size policy: each image is resized (``smart_resize`` with the model family's factor:
    28 px for Qwen2-VL and Qwen2.5-VL, 32 px for Qwen3-VL and Qwen3.5) so that its area lies in
    ``[min_pixels, max_pixels]``; one image token covers factor × factor pixels. ``spec`` (the
    family's patch geometry, mean/std and default pixel bounds) is read from the model folder
    (:func:`mm_preproc.read_spec`) unless given. Admission:
    at most ``max_pending`` requests wait for a worker and at most ``max_inflight`` requests are
    admitted in total; beyond either the server answers 429 with ``Retry-After``. At most
    ``max_engine_queue`` requests (default 2 × max_num_seqs) are between preprocessing and their
    first token; more wait in front of preprocessing (at most ``max_pending`` of them).

    Vision encoder: with ``encoder`` ``onnx`` the graph in ``encoder_path`` (default
    ``<model>/onnx``) runs on ONNX Runtime's ``encoder_provider`` (with
    ``encoder_provider_options``, ``encoder_threads`` intra-op threads per process) right after
    patchify, and vLLM receives ``image_embeds`` (see :mod:`edgeserve.encoder`). ``auto`` (the
    default) and ``engine.dtype`` ``None`` are decided from the machine when the server starts
    (:mod:`edgeserve.auto_defaults`); until then ``workers`` may be ``None``.

    Replicas: with ``replicas`` N > 1 the process serves N whole servers of this configuration
    behind one endpoint (:mod:`edgeserve.replicas`), each on its own GPUs or cores;
    ``engine.tensor_parallel_size`` is the GPUs of each one's engine.
    """

    model: str = str(DEFAULT_MODEL_DIR)
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    mode: PreprocMode = PreprocMode.SPLIT
    workers: int | None = None  # None: default_workers(), which counts a CPU encoder
    # admission
    max_pending: int = 64
    max_inflight: int = 256
    max_engine_queue: int | None = None  # None: 2 × engine.max_num_seqs
    retry_after_s: int = 1
    # media
    allowed_media_dir: str | None = None
    allow_http_media: bool = False
    http_timeout_s: float = 10.0
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 64_000_000
    max_images_per_request: int = 4
    # preprocessing (None: the model's preprocessor_config.json values)
    spec: PreprocSpec | None = None  # None: read from the model folder
    min_pixels: int | None = None
    max_pixels: int | None = None
    preproc_backend: str = "auto"
    fast_decode: bool = True
    # vision encoder
    encoder: EncoderKind = EncoderKind.AUTO
    encoder_path: str | None = None  # None: <model>/onnx
    encoder_provider: str = "CPU"  # an ONNX Runtime execution provider, short or full name
    encoder_threads: int = 1  # intra-op threads of each process's session
    encoder_provider_options: dict[str, Any] = field(default_factory=dict)
    # observability
    trace: str | None = None
    engine_log: str | None = None  # vLLM's output; None: a file in the temp directory
    verbose: bool = False  # vLLM's output on the terminal instead of in engine_log
    sample_interval_s: float = 1.0
    # placement
    # torch intra-op threads of the frontend process, where vLLM's image processor normalizes and
    # patchifies each image: its threads would only contend with the workers for the cores
    frontend_torch_threads: int = 1
    # threads of vLLM's renderer in the frontend (tokenization and the image processor, off the
    # event loop); None: chosen from the machine (edgeserve.auto_defaults.choose_render_threads)
    frontend_render_threads: int | None = None
    engine_core_placement: EngineCorePlacement = EngineCorePlacement.WITH_WORKER
    # how vLLM's EngineCore and model worker wait on each other's queues (edgeserve.engine_wait);
    # None: chosen from the machine (edgeserve.auto_defaults.choose_engine_wait)
    engine_wait: EngineWait | None = None
    # lifecycle
    warmup: bool = True  # image steps of the largest and common sizes before ready (edgeserve.warmup)
    drain_timeout_s: float = 30.0
    replicas: int = 1  # engines behind one endpoint (edgeserve.replicas); each a server of its own
    engine: EngineOptions = field(default_factory=EngineOptions)

    def __post_init__(self) -> None:
        if not isinstance(self.mode, PreprocMode):
            try:
                object.__setattr__(self, "mode", PreprocMode(self.mode))
            except ValueError:
                raise ConfigError(f"mode must be 'split' or 'inline', got {self.mode!r}") from None
        if isinstance(self.engine, dict):
            object.__setattr__(self, "engine", _engine_from_dict(self.engine))
        if not Path(self.model).exists():
            raise ConfigError(
                f"model {self.model!r} does not exist; build the default tiny model with "
                "`edgeserve models build-tiny`, or pass --model DIR"
            )
        self._check_encoder()
        # with encoder auto the count waits for the choice (edgeserve.auto_defaults.resolve)
        if self.workers is not None or self.encoder is not EncoderKind.AUTO:
            workers = default_workers(self.encoder_on_cpu) if self.workers is None else self.workers
            if workers < 1:
                raise ConfigError(f"workers must be >= 1, got {workers}")
            object.__setattr__(self, "workers", workers)
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ConfigError(f"replicas must be an integer >= 1, got {self.replicas!r}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.max_engine_queue is None:
            object.__setattr__(self, "max_engine_queue", 2 * self.engine.max_num_seqs)
        for name in ("max_pending", "max_inflight", "max_engine_queue", "max_image_bytes",
                     "max_image_pixels", "max_images_per_request", "retry_after_s"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if isinstance(self.spec, dict):  # from a config file
            try:
                object.__setattr__(self, "spec", PreprocSpec(**self.spec))
            except (SpecError, TypeError) as e:
                raise ConfigError(f"spec: {e}") from None
        if self.spec is None:
            object.__setattr__(self, "spec", model_spec(Path(self.model)))
        elif not isinstance(self.spec, PreprocSpec):
            raise ConfigError(f"spec must be a mapping of PreprocSpec fields, got {self.spec!r}")
        spec = self.preproc_spec
        if self.min_pixels is None:
            object.__setattr__(self, "min_pixels", spec.min_pixels)
        if self.max_pixels is None:
            object.__setattr__(self, "max_pixels", spec.max_pixels)
        assert self.min_pixels is not None and self.max_pixels is not None
        one_token = spec.factor * spec.factor
        if self.min_pixels < one_token or self.max_pixels < self.min_pixels:
            raise ConfigError(
                f"need {one_token} <= min_pixels <= max_pixels for {spec.family.display_name} "
                f"(one image token is {spec.factor}x{spec.factor} pixels), got "
                f"{self.min_pixels}, {self.max_pixels}"
            )
        if self.allowed_media_dir is not None and not Path(self.allowed_media_dir).is_dir():
            raise ConfigError(f"allowed_media_dir {self.allowed_media_dir!r} is not a directory")
        if self.preproc_backend not in ("auto", "pillow", "opencv"):
            raise ConfigError(
                f"preproc_backend must be auto, pillow or opencv, got {self.preproc_backend!r}")
        if self.sample_interval_s <= 0 or self.http_timeout_s <= 0 or self.drain_timeout_s < 0:
            raise ConfigError("sample_interval_s and http_timeout_s must be > 0, drain_timeout_s >= 0")
        if not isinstance(self.engine_core_placement, EngineCorePlacement):
            try:
                object.__setattr__(self, "engine_core_placement",
                                   EngineCorePlacement(self.engine_core_placement))
            except ValueError:
                raise ConfigError("engine_core_placement must be 'with-worker' or 'any', got "
                                  f"{self.engine_core_placement!r}") from None
        if self.engine_wait is not None and not isinstance(self.engine_wait, EngineWait):
            try:
                object.__setattr__(self, "engine_wait", EngineWait(self.engine_wait))
            except ValueError:
                raise ConfigError("engine_wait must be 'yield' or 'sleep', got "
                                  f"{self.engine_wait!r}") from None

    def _check_encoder(self) -> None:
        if not isinstance(self.encoder, EncoderKind):
            try:
                object.__setattr__(self, "encoder", EncoderKind(self.encoder))
            except ValueError:
                raise ConfigError("encoder must be 'auto', 'none' or 'onnx', "
                                  f"got {self.encoder!r}") from None
        if self.encoder_path is None and self.encoder is EncoderKind.ONNX:
            object.__setattr__(self, "encoder_path", str(Path(self.model) / ENCODER_SUBDIR))
        if not isinstance(self.frontend_torch_threads, int) or self.frontend_torch_threads < 1:
            raise ConfigError("frontend_torch_threads must be an integer >= 1, got "
                              f"{self.frontend_torch_threads!r}")
        threads = self.frontend_render_threads
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"frontend_render_threads must be an integer >= 1, got {threads!r}")
        if threads is not None and threads > 1 and self.engine.keeps_mm_cache:
            raise ConfigError(f"{threads} render threads cannot share vLLM's multimodal processor "
                              "cache (it is not thread-safe): drop --engine-arg "
                              "mm_processor_cache_gb, or give --frontend-render-threads 1")
        if not isinstance(self.encoder_threads, int) or self.encoder_threads < 1:
            raise ConfigError(f"encoder_threads must be an integer >= 1, got {self.encoder_threads!r}")
        if not isinstance(self.encoder_provider, str) or not self.encoder_provider.strip():
            raise ConfigError("encoder_provider must name an ONNX Runtime execution provider "
                              f"(CPU, CUDA, OpenVINO, QNN, CoreML, …), got {self.encoder_provider!r}")
        opts = self.encoder_provider_options
        if not isinstance(opts, dict) or not all(
                isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in opts.items()):
            raise ConfigError("encoder_provider_options must map option names to strings or "
                              f"numbers (ONNX Runtime's provider options), got {opts!r}")

    @property
    def encoder_on_cpu(self) -> bool:
        """Whether the workers run the vision encoder on the host's CPU (``--encoder onnx`` with
        ONNX Runtime's CPU provider or OpenVINO's CPU device), not on an accelerator."""
        if self.encoder is not EncoderKind.ONNX:
            return False
        name = self.encoder_provider.strip().lower()
        if name in ("cpu", "cpuexecutionprovider", "openvino:cpu"):
            return True
        # ONNX Runtime's OpenVINO provider runs on its device_type (CPU unless told otherwise)
        return name in ("openvino", "openvinoexecutionprovider") and str(
            self.encoder_provider_options.get("device_type", "CPU")).upper().startswith("CPU")

    @property
    def preproc_spec(self) -> PreprocSpec:
        """The model family's image-input spec (resolved on construction)."""
        assert self.spec is not None
        return self.spec

    @property
    def model_name(self) -> str:
        """The name clients put in ``model`` (and ``GET /v1/models`` lists)."""
        return self.served_model_name or self.model

    def replace(self, **changes: Any) -> ServeConfig:
        return dataclasses.replace(self, **changes)


def model_spec(model_dir: Path) -> PreprocSpec:
    """The model folder's image-input spec; Qwen2-VL's preset for a folder that is not a
    supported model (the server then refuses it at start, in one paragraph:
    :func:`edgeserve.engine.check_model_folder`)."""
    try:
        return read_spec(model_dir)
    except SpecError:
        return QWEN2_VL


def _engine_from_dict(d: dict[str, Any]) -> EngineOptions:
    known = {f.name for f in dataclasses.fields(EngineOptions)}
    extra = dict(d.get("extra", {}))
    kwargs = {}
    for k, v in d.items():
        if k == "extra":
            continue
        if k in known:
            kwargs[k] = v
        else:
            extra[k] = v
    return EngineOptions(**kwargs, extra=extra)


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML or JSON config file into a dict of :class:`ServeConfig` fields.

    Unknown top-level keys are an error (a typo should not be silently ignored).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # any parse error becomes one clear message
        raise ConfigError(f"cannot parse config file {p}: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of field names to values")
    known = {f.name for f in dataclasses.fields(ServeConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"config file {p}: unknown field(s) {', '.join(unknown)}")
    return data


def build_config(file_values: dict[str, Any], overrides: dict[str, Any]) -> ServeConfig:
    """Merge a config file's values with flag overrides (``None`` = flag not given)."""
    values = dict(file_values)
    engine = dict(values.pop("engine", {}) or {})
    for k, v in overrides.items():
        if v is None:
            continue
        if k.startswith("engine."):
            engine[k.removeprefix("engine.")] = v
        else:
            values[k] = v
    try:
        return ServeConfig(**values, engine=_engine_from_dict(engine))
    except TypeError as e:
        raise ConfigError(str(e)) from None
