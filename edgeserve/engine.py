"""The engine side: vLLM's ``AsyncLLM`` (its EngineCore runs in a process of its own) and a stat
logger that tells the frontend when the engine steps.

Images reach vLLM already decoded and resized to the exact ``smart_resize`` target, as uint8
arrays. The server passes the same ``min_pixels``/``max_pixels`` as ``mm_processor_kwargs`` so
vLLM's Qwen2-VL processor leaves the size alone and only rescales, normalizes and patchifies.
Each image carries a content hash as its ``multi_modal_uuids`` entry, so vLLM does not hash the
pixels itself and its multimodal caches hit when an image repeats.

With ``--encoder onnx`` images arrive as their vision tower's output instead (:mod:`edgeserve.encoder`):
the engine is created with ``enable_mm_embeds`` and an image limit of 0 — which vLLM reads as
"embeddings only": the tower's weights are not even loaded — and each request's images reach it
as one ``{"image_embeds": E, "image_grid_thw": G}`` item (rows of all images concatenated, one
grid row per image), which vLLM's Qwen2-VL splits back by the grids. Content hashes still go as
``multi_modal_uuids`` (they then name the embeddings); no ``mm_processor_kwargs`` go with
embeddings, since nothing is resized or normalized any more.

Engine busy time comes from vLLM's public stat-logger interface: with
``enable_logging_iteration_details`` every step's ``SchedulerStats`` carries
``iteration_details.elapsed_ms``. :class:`EngineActivityLogger` forwards those to the
:class:`~edgeserve.stalls.StallMeter`, together with the scheduler's queue lengths.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeserve import engine_memory, engine_wait, vllm_compat
from edgeserve.config import EncoderKind, ServeConfig
from edgeserve.console import say
from edgeserve.records import EngineStep
from edgeserve.stalls import StallMeter
from edgeserve.start_failures import ModelFolderError
from edgeserve.step_span import StepSpans, StepTiming, engine_interval_s

if TYPE_CHECKING:
    from vllm.outputs import RequestOutput


@dataclass(slots=True)
class EngineState:
    """What the stat logger last heard from the engine."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    aborted_total: int = 0
    on_step: Callable[[EngineStep], None] | None = None  # the trace, once it is open


def _make_logger_factory(meter: StallMeter, state: EngineState) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class EngineActivityLogger(StatLoggerBase):
        """Feeds engine steps and queue lengths to the frontend's stall meter."""

        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index
            self.spans = StepSpans(step_timing(vllm_config))

        def record(self, scheduler_stats: Any, iteration_stats: Any,
                   mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
            if scheduler_stats is None:
                return
            state.running = scheduler_stats.num_running_reqs
            state.waiting = scheduler_stats.num_waiting_reqs
            state.kv_cache_usage = scheduler_stats.kv_cache_usage
            details = scheduler_stats.iteration_details
            if details is not None and not details.is_dummy:
                now = time.monotonic()
                frontend_s = self.spans.output_interval_s(now)
                itl = getattr(iteration_stats, "inter_token_latencies_iter", None) or ()
                span_s = self.spans.span_s(now, details.elapsed_ms / 1000.0, state.running,
                                           engine_interval_s(itl))
                meter.engine_step(now, span_s)
                if state.on_step is not None:
                    state.on_step(EngineStep(
                        t_s=now, duration_s=span_s,
                        prefill_requests=details.num_ctx_requests,
                        prefill_tokens=details.num_ctx_tokens,
                        decode_requests=details.num_generation_requests,
                        decode_tokens=details.num_generation_tokens,
                        encoder_inputs=details.num_encoder_inputs,
                        encoder_tokens=details.num_encoder_output_tokens,
                        running=state.running, waiting=state.waiting,
                        kv_cache_usage=state.kv_cache_usage,
                        output_interval_s=(frontend_s if self.spans.timing
                                           is StepTiming.ENGINE_INTERVAL else None)))

        def log_engine_initialized(self) -> None:
            return None

    return EngineActivityLogger


def step_timing(vllm_config: Any) -> StepTiming:
    """How the engine's steps are timed (:mod:`edgeserve.step_span`): by vLLM's own elapsed time,
    or — under async scheduling, where that is only the dispatch — by output intervals."""
    sched = getattr(vllm_config, "scheduler_config", None)
    return StepTiming.for_engine(bool(getattr(sched, "async_scheduling", False)))


def _psm_segments() -> set[str]:
    """The ``multiprocessing.shared_memory`` segments in /dev/shm (vLLM's message queues)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}
    except OSError:
        return set()


def _mapped_segments() -> set[str]:
    """psm_* segments some live process still maps (read from /proc/*/maps)."""
    used: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/psm_")
                    if i >= 0:
                        used.add(line[i + 9:].split()[0])
        except OSError:
            continue
    return used


def check_model_folder(model_dir: str) -> None:
    """Fail before the engine starts when ``model_dir`` is not a model vLLM can serve."""
    import json
    from pathlib import Path

    from vllm import ModelRegistry

    cfg_path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except OSError:
        raise ModelFolderError(f"{model_dir} is not a model folder: it has no config.json. "
                               "Pass --model DIR of a Hugging Face-format checkpoint, or build "
                               "the default with `edgeserve models build-tiny`.") from None
    except ValueError as e:
        raise ModelFolderError(f"{cfg_path} is not valid JSON ({e}); fix or replace the "
                               "model folder.") from None
    archs = cfg.get("architectures") or []
    known = set(ModelRegistry.get_supported_archs())
    if not archs or not any(a in known for a in archs):
        vl = sorted(a for a in known if "VL" in a and a.startswith("Qwen"))
        raise ModelFolderError(
            f"vLLM does not know the architecture {archs or '(none given)'} of {cfg_path}; "
            f"this vLLM serves Qwen-VL models as {', '.join(vl)}. Pass another --model.")
    from mm_preproc.spec import SpecError, read_spec

    try:  # a family whose images edgeserve cannot preprocess faithfully
        read_spec(model_dir)
    except SpecError as e:
        raise ModelFolderError(f"{e} Pass --model DIR of one of those.") from None


_PROCESS_TORCH_THREADS: list[int] = []  # torch's count before the frontend set its own


def set_frontend_torch_threads(n: int) -> None:
    """Give the frontend process ``n`` torch intra-op threads (remembering torch's own count).

    vLLM's image processor runs in the frontend: rescale, normalize and patchify of every image
    are torch operations, each split over the intra-op threads. The workers already keep the
    cores busy, so the extra threads mostly wait for a core while the event loop's thread spins
    at the operation's end; one thread does the same work for less CPU. Values are identical
    whatever the count (the operations are elementwise and copies)."""
    import torch

    if not _PROCESS_TORCH_THREADS:
        _PROCESS_TORCH_THREADS.append(torch.get_num_threads())
    torch.set_num_threads(n)


@contextlib.contextmanager
def _process_torch_threads() -> Iterator[None]:
    """torch's own thread count while vLLM starts its processes (a forked EngineCore would
    inherit the frontend's), then the frontend's again."""
    if not _PROCESS_TORCH_THREADS:
        yield
        return
    import torch

    ours = torch.get_num_threads()
    torch.set_num_threads(_PROCESS_TORCH_THREADS[0])
    try:
        yield
    finally:
        torch.set_num_threads(ours)


class Engine:
    """A thin wrapper around ``AsyncLLM``: prompt building, sampling parameters, generation."""

    def __init__(self, config: ServeConfig, meter: StallMeter) -> None:
        self.config = config
        self.meter = meter
        self.state = EngineState()
        self._llm: Any = None
        self._tokenizer: Any = None
        self._engine_segments: set[str] = set()  # vLLM's /dev/shm segments (psm_*)
        self._prefix_tokens: dict[str, int] = {}  # prefix key → its tokens (see prefix_of)
        # transformers' Qwen2-VL image processor (every Qwen-VL family's) takes the pixel limits
        # as size bounds
        self.mm_kwargs = {"size": {"shortest_edge": config.min_pixels,
                                   "longest_edge": config.max_pixels}}
        self.takes_embeds = config.encoder is EncoderKind.ONNX

    def start(self) -> None:
        """Create the engine (loads the model, starts EngineCore; tens of seconds on CPU)."""
        from vllm.v1.engine.async_llm import AsyncLLM

        check_model_folder(self.config.model)
        if self.config.engine_wait is not None:  # read by edgeserve.engine_wait in vLLM's processes
            os.environ[engine_wait.ENV] = self.config.engine_wait.value
            if (self.config.engine_wait is engine_wait.EngineWait.SLEEP
                    and not engine_wait.plugin_installed()):
                say("engine wait sleep asked, but vLLM will not load edgeserve's plugin: the "
                    "installed package metadata predates it (run make, or pip install -e . "
                    "again); vLLM's sched_yield spin stays")
        args = self.engine_args()
        factory = _make_logger_factory(self.meter, self.state)
        before = _psm_segments()
        try:  # under `vllm serve`'s usage context, so that vLLM applies its serving defaults
            with _process_torch_threads():  # EngineCore keeps its own thread count
                self._llm = AsyncLLM.from_engine_args(
                    args, usage_context=vllm_compat.serving_usage_context(), stat_loggers=[factory])
        finally:  # a failed start leaves vLLM's queue segments too: shutdown() removes them
            self._engine_segments = _psm_segments() - before
        set_frontend_torch_threads(self.config.frontend_torch_threads)
        self._tokenizer = self._llm.get_tokenizer()

    def engine_args(self) -> Any:
        """The ``AsyncEngineArgs`` the engine is created from (memory lines printed)."""
        from vllm.engine.arg_utils import AsyncEngineArgs

        opts = self.config.engine
        load, why = vllm_compat.load_format_args(self.config.model, opts.extra)
        if why:
            say(why)
        memory = self.memory_args()
        images: dict[str, Any] = {"limit_mm_per_prompt": {
            "image": self.config.max_images_per_request, "video": 0}}
        if self.takes_embeds:
            # limit 0 + enable_mm_embeds: embeddings only, the tower is not loaded; the frontend
            # enforces max_images_per_request itself
            images = {"limit_mm_per_prompt": {"image": 0, "video": 0}, "enable_mm_embeds": True}
        render: dict[str, Any] = {}
        if self.config.frontend_render_threads is not None:
            render["renderer_num_workers"] = self.config.frontend_render_threads
        return AsyncEngineArgs(
            model=self.config.model,
            served_model_name=[self.config.model_name],
            max_model_len=opts.max_model_len,
            max_num_seqs=opts.max_num_seqs,
            dtype=opts.dtype or "auto",  # type: ignore[arg-type]  # validated by vLLM
            enforce_eager=opts.enforce_eager,
            seed=opts.seed,
            enable_prefix_caching=opts.enable_prefix_caching,
            tensor_parallel_size=opts.tensor_parallel_size,
            mm_processor_kwargs=self.mm_kwargs,
            disable_log_stats=True,  # no periodic log lines; our logger still receives stats
            enable_logging_iteration_details=True,
            **images,
            **render,
            **memory,
            **load,
            **opts.extra,
        )

    def memory_args(self) -> dict[str, Any]:
        """The engine's cache sizes (see :mod:`edgeserve.engine_memory`), each line of how they
        were chosen printed to the start-up log. Raises :class:`KVCacheTooSmall` when one request
        of ``max_model_len`` does not fit the NUMA node."""
        cfg, opts = self.config, self.config.engine
        out: dict[str, Any] = {}
        if opts.gpu_memory_utilization is not None:
            out["gpu_memory_utilization"] = opts.gpu_memory_utilization
        if opts.kv_cache_memory_bytes is not None:
            out["kv_cache_memory_bytes"] = opts.kv_cache_memory_bytes
        if not out and vllm_compat.current_build() is vllm_compat.VllmBuild.CPU:
            import torch

            ssm = engine_memory.cpu_ssm_dtype(
                str(opts.extra.get("mamba_ssm_cache_dtype", "auto")),
                avx512_bf16=bool(torch.cpu._is_avx512_bf16_supported()))
            geometry = engine_memory.KVGeometry.from_model_dir(
                cfg.model, opts.dtype or "auto", str(opts.extra.get("kv_cache_dtype", "auto")), ssm)
            plan = engine_memory.plan_kv_cache(
                geometry, max_num_seqs=opts.max_num_seqs, max_model_len=opts.max_model_len,
                node=engine_memory.node_memory(), weights_bytes=engine_memory.weights_bytes(cfg.model),
                block_size=int(opts.extra.get("block_size") or engine_memory.CPU_BLOCK_SIZE_TOKENS),
                prefix_caching=opts.enable_prefix_caching)
            out["kv_cache_memory_bytes"] = plan.bytes_
            say(plan.explanation + " (override: --kv-cache-memory-bytes)")
        elif "kv_cache_memory_bytes" in out:
            say(f"KV cache {out['kv_cache_memory_bytes']} bytes (--kv-cache-memory-bytes)")
        elif out:
            say(f"KV cache: vLLM's fraction {opts.gpu_memory_utilization} "
                 "(--gpu-memory-utilization)")
        if "mm_processor_cache_gb" not in opts.extra and (cfg.frontend_render_threads or 1) > 1:
            out["mm_processor_cache_gb"] = 0
            say(f"multimodal processor cache off: {cfg.frontend_render_threads} render threads "
                "cannot share it (vLLM's cache is not thread-safe)")
        elif "mm_processor_cache_gb" not in opts.extra:
            import psutil

            gb = engine_memory.mm_cache_gb(
                machine_total_bytes=psutil.virtual_memory().total,
                max_pixels=int(cfg.max_pixels or 0), max_num_seqs=opts.max_num_seqs)
            out["mm_processor_cache_gb"] = gb
            say(f"multimodal processor cache capped at {gb:g} GiB "
                 f"({engine_memory.MM_CACHE_ITEMS_PER_SEQ} × max_num_seqs images of max_pixels, "
                 "at most 1/16 of memory; override: --engine-arg mm_processor_cache_gb=N)")
        return out

    def describe(self) -> dict[str, object]:
        """The engine's limits as vLLM resolved them, for the trace header.

        ``kv_cache_tokens`` is vLLM's own capacity ("KV cache size: N tokens": its maximum
        concurrency at ``max_model_len`` times that length), ``kv_cache_blocks`` its pool of
        ``block_size``-token blocks (the null block included). For a model with one KV cache per
        layer the two agree (blocks × block size when ``max_model_len`` is a multiple of it); a
        hybrid model's requests also take fixed state blocks from the same pool
        (:class:`~edgeserve.engine_memory.HybridLayout`), so blocks × block size overstated
        its tokens (111,744 for the tiny Qwen3.5, whose 97 blocks hold 16.17 requests of 4096 tokens: 66,218): the header then
        adds ``kv_attention_groups`` and ``kv_state_blocks_per_request``, from which a reader
        turns vLLM's block usage into attention tokens (:mod:`sim.fit.engine_kv`)."""
        vc = self._llm.vllm_config
        cache, sched = vc.cache_config, vc.scheduler_config
        blocks = cache.num_gpu_blocks or 0
        tokens = getattr(cache, "kv_cache_size_tokens", None)
        out: dict[str, object] = {
            "max_num_seqs": sched.max_num_seqs,
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "max_model_len": vc.model_config.max_model_len,
            "block_size": cache.block_size, "kv_cache_blocks": blocks,
            "kv_cache_tokens": int(tokens) if tokens is not None else blocks * cache.block_size,
            "enable_prefix_caching": bool(cache.enable_prefix_caching),
            "platform": "cpu" if vc.device_config.device_type == "cpu" else "gpu",
            "step_timing": step_timing(vc).value}
        concurrency = getattr(cache, "kv_cache_max_concurrency", None)
        if concurrency is not None:
            out["kv_cache_max_concurrency"] = round(float(concurrency), 4)
        layout = self._hybrid_layout(bool(cache.enable_prefix_caching))
        if layout is not None:
            out["kv_attention_groups"] = layout.attention_groups
            out["kv_state_blocks_per_request"] = (layout.state_groups
                                                  * layout.state_blocks_per_group)
        return out

    def _hybrid_layout(self, prefix_caching: bool) -> engine_memory.HybridLayout | None:
        """The hybrid pages of the model's folder, ``None`` for a model without linear-attention
        layers (or a model that is not a local folder). The group counts do not depend on the
        block size."""
        try:
            geometry = engine_memory.KVGeometry.from_model_dir(self.config.model)
        except ValueError:
            return None
        if geometry.recurrent is None or not geometry.num_layers:
            return None
        return engine_memory.HybridLayout.of(geometry, prefix_caching=prefix_caching)

    def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
        # vLLM's processes unlink their shared-memory queues when they stop; a SIGKILLed
        # EngineCore cannot. Remove those that appeared with our engine and nobody maps any more.
        # vLLM's model worker may outlive a killed EngineCore by a moment: give it 5 s to go.
        deadline = time.monotonic() + 5.0
        left = {n for n in self._engine_segments if os.path.exists(f"/dev/shm/{n}")}
        while left:
            for name in left - _mapped_segments():
                with contextlib.suppress(OSError):
                    os.unlink(f"/dev/shm/{name}")
            left = {n for n in left if os.path.exists(f"/dev/shm/{n}")}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self._engine_segments = set()

    @property
    def errored(self) -> bool:
        return self._llm is None or bool(self._llm.errored)

    def build_prompt(self, messages: list[dict[str, Any]]) -> str:
        return str(self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        ))

    def prefix_of(self, messages: list[dict[str, Any]]) -> tuple[str, int] | None:
        """The prompt's shared prefix — its leading system messages — as ``(key, tokens)``: a
        hash of their content and their length in the chat template's rendering; ``None``
        without a system message. One app's requests share a system prompt, whose KV vLLM's
        prefix cache reuses; the trace records the key so that a replay in the simulator looks
        it up in its cloud servers' prefix caches. Rendered and tokenized once per distinct
        prefix (a few thousand are remembered)."""
        n = 0
        while n < len(messages) and messages[n].get("role") == "system":
            n += 1
        if n == 0:
            return None
        head = messages[:n]
        key = hashlib.blake2b(json.dumps(head, sort_keys=True).encode(),
                              digest_size=8).hexdigest()
        tokens = self._prefix_tokens.get(key)
        if tokens is None:
            text = self._tokenizer.apply_chat_template(head, tokenize=False,
                                                       add_generation_prompt=False)
            tokens = len(self._tokenizer.encode(str(text), add_special_tokens=False))
            if len(self._prefix_tokens) >= 4096:
                self._prefix_tokens.clear()
            self._prefix_tokens[key] = tokens
        return key, tokens

    def sampling_params(self, *, max_tokens: int | None, temperature: float | None,
                        top_p: float | None, top_k: int | None, seed: int | None,
                        stop: list[str] | None, ignore_eos: bool, min_tokens: int) -> Any:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        kwargs: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": 1.0 if temperature is None else temperature,
            "seed": seed,
            "ignore_eos": ignore_eos,
            "min_tokens": min_tokens,
            "stop": stop,
            "output_kind": RequestOutputKind.DELTA,
        }
        if top_p is not None:
            kwargs["top_p"] = top_p
        if top_k is not None:
            kwargs["top_k"] = top_k
        return SamplingParams(**kwargs)

    def generate(self, request_id: str, prompt: str, images: list[np.ndarray],
                 uuids: list[str], params: Any,
                 grids: list[tuple[int, ...]] | None = None) -> AsyncIterator[RequestOutput]:
        """Start generating. ``images`` are ready-sized pixels, or with ``grids`` (one (t, h, w)
        per image) their image embeddings, whose shapes the caller has checked."""
        engine_prompt: dict[str, Any] = {"prompt": prompt}
        if images and grids is not None:
            import torch

            embeds = images[0] if len(images) == 1 else np.concatenate(images)
            engine_prompt["multi_modal_data"] = {"image": {
                "image_embeds": torch.from_numpy(embeds),
                "image_grid_thw": torch.tensor(grids, dtype=torch.int64)}}
            engine_prompt["multi_modal_uuids"] = {"image": uuids}
        elif images:
            engine_prompt["multi_modal_data"] = {"image": images}
            engine_prompt["multi_modal_uuids"] = {"image": uuids}
            engine_prompt["mm_processor_kwargs"] = self.mm_kwargs
        return self._rendered_generate(engine_prompt, params, request_id)

    async def _rendered_generate(self, prompt: dict[str, Any], params: Any,
                                 request_id: str) -> AsyncIterator[RequestOutput]:
        """``generate`` on the rendered prompt, rendered at the first ``__anext__`` — where
        vLLM's raw-prompt path rendered it — so that errors and timing stay where they were."""
        engine_input = await vllm_compat.render_prompt(self._llm, prompt)
        gen = self._llm.generate(engine_input, params, request_id)
        try:
            async for out in gen:
                yield out
        finally:
            await gen.aclose()

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)
            self.state.aborted_total += 1

    async def check_health(self) -> None:
        await self._llm.check_health()
