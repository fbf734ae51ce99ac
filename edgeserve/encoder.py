"""The vision encoder as a stage of its own: the exported tower on ONNX Runtime (``--encoder onnx``).

By default vLLM runs the model's vision tower inside its engine, in the step that prefills the
image's first chunk. With ``--encoder onnx`` the tower (``edgeserve models export-encoder``,
:mod:`models.onnx_encoder`) runs one stage earlier, in the process that has just patchified the
image, and the engine is handed its output::

    worker:  decode ─▶ resize ─▶ normalize/patchify ─▶ encode (ONNX Runtime)
                                  pixel_values (patches, 1176) f32 ─▶ image_embeds (tokens, hidden) f32
    engine:  {"image_embeds": E, "image_grid_thw": G}   (enable_mm_embeds; the tower never runs)

For one image ``E`` has ``t·h·w / merge²`` rows (one per image token; (t, h, w) is the patch
grid) and the language model's hidden size as columns; several images of one request are
concatenated row-wise with one grid row each, as vLLM's Qwen2-VL splits them back by the grids.
An ``E`` of another shape would make vLLM place the wrong number of image tokens or crash the
engine, so :func:`embeds_shape_error` is checked in the frontend before every hand-off.

:func:`check_encoder` runs at start-up, before any worker or the engine: the export must exist,
its ``encoder.json`` must describe this model's tower (:meth:`EncoderMeta.mismatches`), and the
provider must be in the installed onnxruntime. Each failure is one paragraph naming the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from edgeserve.config import EncoderKind, ServeConfig

if TYPE_CHECKING:
    from models.onnx_encoder.runtime import OnnxEncoder


class EncoderError(ValueError):
    """The encoder export or provider cannot be used (found before the engine starts)."""


class EncoderSpec(msgspec.Struct, frozen=True, array_like=True):
    """What a process needs to open its own encoder session; fixed for a server's lifetime."""

    graph: str  # encoder.onnx
    provider: str  # the full execution-provider name, checked to be installed
    provider_options: dict[str, str]
    intra_op_threads: int
    merge_size: int  # the tower's spatial merge (2 for Qwen2-VL): merge² patches per token
    hidden_size: int  # the language model's width: columns of image_embeds

    def open(self) -> OnnxEncoder:
        """An ONNX Runtime session on this graph, or OpenVINO's compiled model for an
        ``openvino:DEVICE`` provider (hundreds of ms; once per process)."""
        from models.onnx_encoder.runtime import open_encoder

        return open_encoder(Path(self.graph), self.provider, dict(self.provider_options),
                            intra_op_threads=self.intra_op_threads)


def check_encoder(cfg: ServeConfig) -> EncoderSpec | None:
    """The encoder the config asks for, checked; None unless ``encoder: onnx``.

    Raises :class:`EncoderError` with the fix in its message.
    """
    if cfg.encoder is not EncoderKind.ONNX:
        return None
    from models.onnx_encoder.meta import GRAPH_NAME, META_NAME, EncoderMeta, NotQwen2VLError
    from models.onnx_encoder.runtime import ProviderNotAvailableError, resolve_providers

    folder = Path(str(cfg.encoder_path))
    export = f"`edgeserve models export-encoder {cfg.model} --out {folder}`"
    missing = [n for n in (GRAPH_NAME, META_NAME) if not (folder / n).is_file()]
    if missing:
        raise EncoderError(
            f"--encoder onnx needs the model's exported vision tower, but {folder} has no "
            f"{' and no '.join(missing)}. Run {export} (it writes and verifies both; "
            "encoder.json last), pass --encoder-path DIR of an existing export, or serve "
            "without --encoder onnx.")
    try:
        meta = EncoderMeta.read(folder / META_NAME)
    except (ValueError, TypeError, KeyError) as e:
        raise EncoderError(f"{folder / META_NAME} cannot be read ({type(e).__name__}: {e}); "
                           f"re-export with {export}.") from None
    try:
        wrong = meta.mismatches(Path(cfg.model))
    except NotQwen2VLError as e:
        raise EncoderError(f"--encoder onnx serves Qwen2-VL towers only: {e}. Serve this model "
                           "without --encoder onnx.") from None
    if wrong:
        raise EncoderError(
            f"the encoder export in {folder} is not the vision tower of {cfg.model} "
            f"({'; '.join(wrong)}): it was exported from another model or from other weights. "
            f"Re-export with {export}, or pass --encoder-path DIR of this model's export.")
    try:
        provider = resolve_providers([cfg.encoder_provider])[0]
    except ProviderNotAvailableError as e:
        raise EncoderError(
            f"{e}. Install the onnxruntime build that has it (onnxruntime-gpu for CUDA, "
            "onnxruntime-openvino, onnxruntime-qnn, …) or, for openvino:DEVICE, the openvino "
            "package (`pip install 'edgeserve[openvino]'`) in this environment, or pass "
            "--encoder-provider CPU.") from None
    return EncoderSpec(
        graph=str(folder / GRAPH_NAME), provider=provider,
        provider_options={k: str(v) for k, v in cfg.encoder_provider_options.items()},
        intra_op_threads=cfg.encoder_threads, merge_size=meta.merge_size,
        hidden_size=meta.hidden_size)


def embed_rows(grid_thw: Sequence[int], merge_size: int) -> int:
    """Image tokens of one image with patch grid (t, h, w): ``t·h·w / merge²``."""
    t, h, w = grid_thw
    return t * h * w // (merge_size * merge_size)


def embeds_shape_error(shape: Sequence[int], grid_thw: Sequence[int], merge_size: int,
                       hidden_size: int) -> str | None:
    """Why an ``image_embeds`` array of ``shape`` cannot go with ``grid_thw``; None when it can."""
    if len(grid_thw) != 3 or any(g < 1 for g in grid_thw):
        return f"image_grid_thw must be three positive numbers (t, h, w), got {list(grid_thw)}"
    _, h, w = grid_thw
    if h % merge_size or w % merge_size:
        return f"image_grid_thw {list(grid_thw)}: h and w must be multiples of {merge_size}"
    rows = embed_rows(grid_thw, merge_size)
    if len(shape) != 2 or tuple(shape) != (rows, hidden_size):
        return (f"image_embeds has shape {tuple(shape)}, but the grid {list(grid_thw)} needs "
                f"({rows}, {hidden_size}) (t·h·w/{merge_size}² rows, the model's hidden size "
                "columns)")
    return None
