"""Which serving paths a model family can take, and what the server does instead.

Not every path exists for every Qwen-VL family. ``--encoder onnx`` runs an ONNX export of the
vision tower in the preprocessing stage (:mod:`models.onnx_encoder`), and that exporter handles
Qwen2-VL's tower only: Qwen2.5-VL's window attention and Qwen3-VL's deepstack features (added to
the language model's first layers, so not a plain ``image_embeds`` tensor) are not exported. A
server pointed at such a model with ``--encoder onnx`` says so once at start and runs the tower
inside the vLLM engine as without the flag — rather than starting and failing every request.
"""

from __future__ import annotations

from edgeserve.config import EncoderKind, ServeConfig
from mm_preproc.spec import Family

#: families whose vision tower ``edgeserve models export-encoder`` exports
ONNX_ENCODER_FAMILIES = frozenset({Family.QWEN2_VL})


def resolve_paths(cfg: ServeConfig) -> tuple[ServeConfig, list[str]]:
    """The configuration the server runs with, and one line per path it had to fall back from."""
    family = cfg.preproc_spec.family
    notes: list[str] = []
    if cfg.encoder is EncoderKind.ONNX and family not in ONNX_ENCODER_FAMILIES:
        notes.append(
            f"--encoder onnx: the ONNX export covers Qwen2-VL's vision tower only, not "
            f"{family.display_name}'s; its tower runs inside the vLLM engine instead "
            "(as with --encoder none).")
        cfg = cfg.replace(encoder=EncoderKind.NONE)
    return cfg, notes
