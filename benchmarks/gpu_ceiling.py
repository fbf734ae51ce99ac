"""The GPU ceiling of ``gpu_compare.py``: the engine fed inputs that no CPU stage holds back.

vLLM's ``AsyncLLM`` runs in this process (its EngineCore in its own, as in every server) with the
engine arguments ``vllm serve`` gets, under ``vllm serve``'s usage context. Each request's image
is made before the clock starts, already at the size the servers resize 12 MP photos to (a
``smart_resize`` target of the token budget), so what is left on the CPU is vLLM's own
rescale/normalize/patchify of a ready image — the part of the pipeline no server can skip — on
the renderer's threads (as many as edgeserve's default gives its frontend on the machine: four
on a 16-core GPU host). The
requests follow the same Poisson schedules as the servers'; TTFT is from a request's scheduled
arrival to its first output with text.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s
from edgeserve.bench.report import percentile_key
from edgeserve.bench.sweep import SweepResult

MiB = 1024 * 1024


def engine_args(cfg: Any) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    from edgeserve import hardware, vllm_compat
    from edgeserve.auto_defaults import choose_render_threads

    load, _ = vllm_compat.load_format_args(cfg.model, {})
    memory: dict[str, Any] = ({"kv_cache_memory_bytes": 256 * MiB} if cfg.smoke
                              else {"gpu_memory_utilization": cfg.gpu_memory_utilization})
    # the image processor on as many threads beside the event loop as edgeserve's default gives
    # its frontend on this machine; with several, their cache is off (not thread-safe), and
    # every image is unique anyway
    threads = int(choose_render_threads(hardware.detect()).value)
    render: dict[str, Any] = {"renderer_num_workers": threads}
    if threads > 1:
        render["mm_processor_cache_gb"] = 0
    return AsyncEngineArgs(
        model=str(cfg.model), served_model_name=["m"], max_model_len=cfg.max_model_len,
        max_num_seqs=cfg.max_num_seqs, limit_mm_per_prompt={"image": 4, "video": 0},
        mm_processor_kwargs={"max_pixels": cfg.max_pixels}, disable_log_stats=True,
        **memory, **render, **load)


def target_hw(cfg: Any) -> tuple[int, int]:
    """The size a 4000x3000 photo is resized to at the budget (height, width)."""
    from mm_preproc.smart_resize import smart_resize
    from mm_preproc.spec import read_spec

    spec = read_spec(cfg.model)
    h, w = smart_resize(3000, 4000, factor=spec.factor, min_pixels=spec.min_pixels,
                        max_pixels=cfg.max_pixels)
    return int(h), int(w)


def _lengths(spec: str, n: int, seed: int) -> list[int]:
    lo, _, hi = spec.partition("-")
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(int(lo), int(hi or lo) + 1, size=n)]


async def _one(llm: Any, prompt: str, image: np.ndarray, uuid: str, max_tokens: int,
               start_at: float) -> tuple[float | None, float | None]:
    """(TTFT from ``start_at``, completion time on the perf_counter clock); (None, None) when
    the request failed."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    from edgeserve import vllm_compat

    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA)
    request = {"prompt": prompt, "multi_modal_data": {"image": [image]},
               "multi_modal_uuids": {"image": [uuid]}}
    ttft = None
    try:
        engine_input = await vllm_compat.render_prompt(llm, request)
        async for out in llm.generate(engine_input, params, uuid):
            if ttft is None and out.outputs and out.outputs[0].text:
                ttft = time.perf_counter() - start_at
    except Exception:  # a failed request counts as failed, as the HTTP client counts it
        return None, None
    return ttft, time.perf_counter()


async def _rate(llm: Any, prompt: str, cfg: Any, i: int, rate: float,
                hw: tuple[int, int]) -> tuple[dict[str, Any], float, float]:
    offsets = [float(x) for x in arrival_offsets_s(
        ArrivalConfig(rate_rps=rate, num_requests=None, duration_s=cfg.duration_s, seed=i))]
    rng = np.random.default_rng(1000 + i)
    images = [rng.integers(0, 256, size=(*hw, 3), dtype=np.uint8) for _ in offsets]
    lengths = _lengths(cfg.output_len, len(offsets), i)
    t0 = time.perf_counter() + 0.2
    wall0 = time.time()
    done = await asyncio.gather(*(
        _one(llm, prompt, img, f"ceiling-{i}-{k}-{rate:g}", n, t0 + off)
        for k, (img, n, off) in enumerate(zip(images, lengths, offsets, strict=True))))
    wall1 = time.time()
    ttfts = [t for t, _ in done if t is not None]
    finished = {k: end for k, (_, end) in enumerate(done) if end is not None}
    e2e = [end - (t0 + offsets[k]) for k, end in finished.items()]
    span = max(finished.values()) - t0 if finished else 0.0  # first arrival .. last completion
    ms = [t * 1e3 for t in ttfts]
    point: dict[str, Any] = {
        "label": f"gpu-ceiling @ {rate:g} req/s", "request_rate": rate,
        "num_prompts": len(offsets), "completed": len(finished),
        "failed": len(offsets) - len(finished),
        "request_throughput": len(finished) / span if span else 0.0,
        "median_ttft_ms": float(np.median(ms)) if ms else None,
        percentile_key("ttft", 99.0): float(np.percentile(ms, 99)) if ms else None,
        percentile_key("e2el", 99.0): float(np.percentile(e2e, 99) * 1e3) if e2e else None,
        "stall_fraction": None, "cdf_ttft_s": [round(t, 5) for t in ttfts],
    }
    return point, wall0, wall1


async def sweep_ceiling(cfg: Any, gpu: Any, add_figures: Callable[..., None],
                        point_line: Callable[[dict[str, Any]], str]) -> SweepResult:
    """The ceiling's sweep: one point per rate, as the servers' (``gpu_compare.py``)."""
    from gpu_compare import tree_cpu_s
    from vllm.v1.engine.async_llm import AsyncLLM

    from edgeserve import vllm_compat
    from edgeserve.bench.workload import DEFAULT_PROMPT

    t_start = time.monotonic()
    llm = AsyncLLM.from_engine_args(engine_args(cfg),
                                    usage_context=vllm_compat.serving_usage_context())
    result = SweepResult(ttft_p99_bound_ms=3000.0)
    try:
        print(f"gpu-ceiling engine ready after {time.monotonic() - t_start:.0f} s", flush=True)
        tok = llm.get_tokenizer()
        prompt = str(tok.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"},
                                          {"type": "text", "text": DEFAULT_PROMPT}]}],
            tokenize=False, add_generation_prompt=True))
        hw = target_hw(cfg)
        warm = np.zeros((*hw, 3), dtype=np.uint8)
        for k in range(cfg.warmup_requests):
            await _one(llm, prompt, warm + k, f"ceiling-warm-{k}", 8, time.perf_counter())
        for i, rate in enumerate(cfg.rates_rps):
            cpu0 = tree_cpu_s(os.getpid())
            point, w0, w1 = await _rate(llm, prompt, cfg, i, rate, hw)
            add_figures(point, gpu.mean(w0, w1), tree_cpu_s(os.getpid()) - cpu0)
            result.points.append(point)
            print(point_line(point), flush=True)
            p99 = point.get(percentile_key("ttft", 99.0)) or float("inf")
            if point["failed"] or p99 > 9000.0:
                break
    finally:
        llm.shutdown()
        del llm  # its __del__ shuts down again: now, not at interpreter exit
        gc.collect()
    return result
