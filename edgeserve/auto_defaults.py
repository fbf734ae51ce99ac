"""The defaults that follow from the machine: the engine's precision and where the vision tower runs.

Both were first tuned on whatever CPU was at hand, and both turned out to depend on it:

* **Precision.** vLLM runs a checkpoint in its own dtype (bfloat16 for the Qwen-VL models). A
  CPU with ``avx512_bf16`` or ``amx_bf16`` computes in bfloat16 natively; one without emulates
  it. Measured on 2-core EPYCs, an engine step carrying an image: AVX2 only (Zen 2) 1159 ms in
  bfloat16 against 465 ms in float32 (2.5×); AVX512-BF16 (Zen 4) within 7 % of each other. So on
  vLLM's CPU build: bfloat16 where the CPU has it natively, float32 otherwise; on a GPU the
  model's own dtype. A model with linear-attention (gated delta net) layers, as Qwen3.5's, keeps
  bfloat16 on the CPU build, which runs them in nothing else. ``--dtype`` overrides.
* **Vision encoder.** On vLLM's CPU build the tower inside the engine stalls every step that
  carries an image, so streaming stalls with it: on the Zen 4, ITL p99 269 ms with the tower in
  the engine against 7 ms with the exported tower on ONNX Runtime in the preprocessing workers
  (TTFT p50 0.26 s against 0.38 s); on the AVX2-only EPYC the exported float32 graph was also
  2.3–3.0× faster than vLLM's bfloat16 tower (docs/onnx_encoder.md). So on the CPU build the
  workers run it wherever the model has an export (in ``--mode inline`` there are no workers,
  and the engine keeps it); on a GPU vLLM's tower runs there.
  ``--encoder none`` or ``onnx`` overrides.
* **Frontend render threads.** vLLM's renderer in the frontend still runs its image processor
  on every ready-sized image (rescale, normalize, patchify: torch operations that release the
  GIL) and tokenizes the prompt. On an H200 host with 16 cores, run on the event loop, it held
  the frontend at one full core from 16-24 req/s of 12 MP photos (docs/results/
  2026-12-05-h200-gpu-compare.md), the limit of the whole server. So on a GPU the renderer gets
  ``min(4, cores // 4)`` threads beside the event loop (vLLM's ``renderer_num_workers``, which
  needs its multimodal processor cache off); on vLLM's CPU build one, the count its image
  processor runs on there anyway, and the cores are the workers'. ``--frontend-render-threads``
  overrides.
* **How the engine's processes wait.** vLLM's EngineCore and model worker spin on ``sched_yield``
  for a second after each message; under Linux's EEVDF scheduler such a spin forfeits its time and
  can leave a runnable process unscheduled for seconds where tasks share a core. On vLLM's CPU build,
  where the model worker and the EngineCore share one core, they sleep 50 us per turn instead; on a
  GPU host vLLM's spin stays (:mod:`edgeserve.engine_wait`). ``--engine-wait`` overrides.

The rules take a :class:`~edgeserve.hardware.Hardware`, so they are tested on machines other
than the one running the tests; :func:`resolve` applies them to a config and returns the lines
the server prints at start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgeserve.config import EncoderKind, PreprocMode, ServeConfig
from edgeserve.engine_memory import LINEAR_ATTENTION
from edgeserve.engine_wait import EngineWait
from edgeserve.hardware import Hardware, Platform


@dataclass(slots=True, frozen=True)
class Choice:
    """A value chosen for the user, and why (printed at start)."""

    value: str
    reason: str


def model_dtype(model_dir: str | Path) -> str:
    """The checkpoint's dtype from its ``config.json`` (``text_config`` first); ``bfloat16``
    when the folder does not say, as vLLM assumes."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return "bfloat16"
    text = cfg.get("text_config") or {}
    name = (text.get("torch_dtype") or text.get("dtype") or cfg.get("torch_dtype")
            or cfg.get("dtype") or "bfloat16")
    return str(name).removeprefix("torch.")


def has_linear_attention(model_dir: str | Path) -> bool:
    """Whether the checkpoint has linear-attention (gated delta net) layers, as Qwen3.5's."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    text = cfg.get("text_config") or cfg
    return LINEAR_ATTENTION in (text.get("layer_types") or []) or (
        "full_attention_interval" in text)


def choose_dtype(hw: Hardware, checkpoint_dtype: str, *, linear_attention: bool = False
                 ) -> Choice:
    """The engine's dtype on ``hw`` for a checkpoint stored in ``checkpoint_dtype``;
    ``linear_attention``: the model has gated-delta-net layers, which vLLM's CPU build runs in
    bfloat16 only."""
    if hw.platform is Platform.GPU:
        return Choice(checkpoint_dtype, "the model's own dtype on a GPU")
    if linear_attention:
        return Choice("bfloat16", "vLLM's CPU build runs the model's linear-attention (gated "
                      "delta net) layers in bfloat16 only")
    feature = hw.bf16_feature
    if feature is not None:
        return Choice("bfloat16", f"vLLM's CPU build on a CPU with {feature}: native bfloat16")
    return Choice("float32", "vLLM's CPU build on a CPU without avx512_bf16 or amx_bf16, where "
                  "bfloat16 is emulated (2.5x slower image steps than float32 on an AVX2-only "
                  "EPYC)")


def choose_encoder(hw: Hardware, export_problem: str | None, *, workers: bool = True) -> Choice:
    """Where the vision tower runs on ``hw``; ``export_problem`` says why the model's ONNX export
    cannot be used (None: it can); ``workers``: whether preprocessing runs in worker processes
    (split mode) rather than on the frontend's event loop (inline), where an encode would stall
    every stream."""
    if hw.platform is Platform.GPU:
        return Choice(EncoderKind.NONE.value, "vLLM's tower inside the engine, on the GPU")
    if not workers:
        return Choice(EncoderKind.NONE.value, "vLLM's tower inside the engine: inline mode has "
                      "no preprocessing workers to run it in")
    if export_problem is not None:
        return Choice(EncoderKind.NONE.value, f"vLLM's tower inside the engine: {export_problem}")
    if "amx_bf16" in hw.cpu_flags:
        why = ("the exported tower on ONNX Runtime in the workers; with AMX its CPU time is level "
               "with vLLM's tower and its effect on streaming (ITL) is not measured, chosen as "
               "on AVX512-BF16 where it keeps image steps out of the engine")
    elif "avx512_bf16" in hw.cpu_flags:
        why = ("the exported tower on ONNX Runtime in the workers: keeps image steps out of the "
               "engine (ITL p99 7 ms against 269 ms with the tower in the engine, AVX512-BF16 "
               "EPYC, docs/onnx_encoder.md)")
    else:
        why = ("the exported tower on ONNX Runtime in the workers: 2.3-3.0x faster than vLLM's "
               "bfloat16 tower on a CPU without native bfloat16 (docs/onnx_encoder.md)")
    return Choice(EncoderKind.ONNX.value, why)


def choose_render_threads(hw: Hardware, *, cache_kept: bool = False) -> Choice:
    """Threads of vLLM's renderer in the frontend on ``hw``; ``cache_kept``: the user asked for
    vLLM's multimodal processor cache, which more than one thread cannot share."""
    if hw.platform is not Platform.GPU:
        return Choice("1", "vLLM's CPU build runs its image processor on one thread, and the "
                      "cores are the preprocessing workers'")
    if cache_kept:
        return Choice("1", "the multimodal processor cache was asked for "
                      "(--engine-arg mm_processor_cache_gb), and it is not thread-safe")
    n = min(4, max(1, hw.cores // 4))
    return Choice(str(n), f"vLLM's image processor and tokenizer beside the event loop on a GPU "
                  f"host of {hw.cores} cores (one thread held the frontend at a full core from "
                  "16 req/s of 12 MP photos on an H200)")


def choose_engine_wait(hw: Hardware) -> Choice:
    """How vLLM's EngineCore and model worker wait on each other's queues on ``hw``."""
    if hw.platform is Platform.GPU:
        return Choice(EngineWait.YIELD.value, "vLLM's own spin on a GPU host, where cores are many "
                      "and the step loop's latency counts")
    return Choice(EngineWait.SLEEP.value, "50 us sleeps instead of vLLM's sched_yield spin on its "
                  "CPU build, where the model worker shares its core (two servers on one 2-core "
                  "host stopped for 5-25 s at a time with the spin)")


def export_problem(cfg: ServeConfig) -> str | None:
    """Why ``--encoder onnx`` cannot serve this model as configured, or None."""
    from edgeserve.encoder import EncoderError, check_encoder
    from edgeserve.family_paths import ONNX_ENCODER_FAMILIES

    family = cfg.preproc_spec.family
    if family not in ONNX_ENCODER_FAMILIES:
        return f"the ONNX export covers Qwen2-VL's tower only, not {family.display_name}'s"
    try:
        check_encoder(cfg.replace(encoder=EncoderKind.ONNX))
    except EncoderError as e:
        return _first_sentence(str(e))
    return None


def _first_sentence(text: str) -> str:
    return text.partition(". ")[0]


def resolve(cfg: ServeConfig, hw: Hardware) -> tuple[ServeConfig, list[str]]:
    """``cfg`` with its machine-dependent defaults filled in, and one start-up line each."""
    lines = [f"machine: {hw.describe()}"]
    opts = cfg.engine
    if opts.dtype is None:
        choice = choose_dtype(hw, model_dtype(cfg.model),
                              linear_attention=has_linear_attention(cfg.model))
        cfg = cfg.replace(engine=opts.replace(dtype=choice.value))
        lines.append(f"dtype {choice.value}: {choice.reason} (override: --dtype)")
    else:
        lines.append(f"dtype {opts.dtype} (--dtype)")
    if cfg.encoder is EncoderKind.AUTO:
        split = cfg.mode is PreprocMode.SPLIT
        problem = None if hw.platform is Platform.GPU or not split else export_problem(cfg)
        choice = choose_encoder(hw, problem, workers=split)
        cfg = cfg.replace(encoder=EncoderKind(choice.value))
        lines.append(f"encoder {choice.value}: {choice.reason} (override: --encoder none|onnx)")
    if cfg.engine_wait is None:
        choice = choose_engine_wait(hw)
        cfg = cfg.replace(engine_wait=EngineWait(choice.value))
        lines.append(f"engine wait {choice.value}: {choice.reason} (override: --engine-wait)")
    else:
        lines.append(f"engine wait {cfg.engine_wait.value} (--engine-wait)")
    if cfg.frontend_render_threads is None:
        choice = choose_render_threads(hw, cache_kept=cfg.engine.keeps_mm_cache)
        cfg = cfg.replace(frontend_render_threads=int(choice.value))
        lines.append(f"frontend render threads {choice.value}: {choice.reason} "
                     "(override: --frontend-render-threads)")
    return cfg, lines
