"""Writing a Qwen2-VL model's vision tower to ``encoder.onnx``, verified, then ``encoder.json``.

The exporter is ``torch.onnx.export``: the TorchScript one (``dynamo=False`` with
``dynamic_axes``) by default, or the ``torch.export``-based one (``dynamo=True`` with
``dynamic_shapes``). Both export this module cleanly and give the same figures; on the tiny model
the TorchScript one takes about 1 s, the dynamo one 7–9 s. Traps met on the way:

* the legacy TorchScript exporter still needs the ``onnx`` package ("Module onnx is not
  installed!"); the dynamo one needs ``onnx`` and ``onnxscript``;
* the dynamo exporter implements opset 18 and up (a lower request is converted after export),
  and warns about ``dynamic_axes`` — hence opset 18 and ``dynamic_shapes`` on that path;
* in transformers 5 the tower returns a model output: the merged image embeddings are its
  ``pooler_output``; ``last_hidden_state`` is the unmerged (patches, embed_dim) sequence;
* the example input is a two-frame 4×6 grid, so that no grid value is a special case (0 or 1)
  an exporter could fold into a constant;
* the contrib op needs ``custom_opsets={"com.microsoft": 1}`` on the TorchScript path.
"""

from __future__ import annotations

import importlib.util
import json
import time
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Any

from models.onnx_encoder.graph import CONTRIB_DOMAIN, graph_module
from models.onnx_encoder.meta import (
    GRAPH_NAME,
    INPUT_NAMES,
    META_NAME,
    OUTPUT_NAME,
    EncoderMeta,
    architecture_of,
    read_model_config,
    vision_config_sha,
    weights_fingerprint,
)
from models.onnx_encoder.verify import load_reference_tower, verify

DEFAULT_OPSET = 18  # the dynamo exporter's lowest; LayerNormalization is one op from 17 on


class Exporter(StrEnum):
    """Which ``torch.onnx.export`` path writes the graph."""

    TORCHSCRIPT = "torchscript"  # dynamo=False, dynamic_axes; needs `onnx`
    DYNAMO = "dynamo"  # dynamo=True (torch.export); needs `onnx` and `onnxscript`

    @property
    def packages(self) -> tuple[str, ...]:
        """The Python packages ``torch.onnx.export`` needs on this path."""
        return ("onnx",) if self is Exporter.TORCHSCRIPT else ("onnx", "onnxscript")

    @property
    def attention(self) -> str:
        """How the graph this path writes computes attention (recorded in ``encoder.json``)."""
        if self is Exporter.TORCHSCRIPT:
            return f"{CONTRIB_DOMAIN}.MultiHeadAttention per frame, no mask"
        return "MatMul-Softmax-MatMul per frame, no mask"

    @property
    def label(self) -> str:
        how = "TorchScript, dynamo=False" if self is Exporter.TORCHSCRIPT else "torch.export, dynamo=True"
        return f"torch.onnx.export ({how})"


def export_encoder(model_dir: Path, out_dir: Path, *, exporter: Exporter | str = Exporter.TORCHSCRIPT,
                   opset: int = DEFAULT_OPSET) -> Path:
    """Write ``model_dir``'s vision tower to ``out_dir/encoder.onnx``, verify it, then write
    ``encoder.json``. Returns the graph's path.

    Raises :class:`NotQwen2VLError` for a folder that is not a Qwen2-VL model and
    :class:`ImportError` when the exporter's packages are not installed.
    """
    model_dir, out_dir, exporter = Path(model_dir), Path(out_dir), Exporter(exporter)
    cfg = read_model_config(model_dir)
    missing = [p for p in exporter.packages if importlib.util.find_spec(p) is None]
    if missing:
        raise ImportError(f"the {exporter.value} exporter needs {' and '.join(missing)} "
                          f"(pip install {' '.join(missing)})")
    import torch
    import transformers

    visual = load_reference_tower(model_dir)
    vc = visual.config
    out_dir.mkdir(parents=True, exist_ok=True)
    graph = out_dir / GRAPH_NAME
    for stale in (out_dir / META_NAME, graph, _external_data(graph)):  # no stale "verified"
        stale.unlink(missing_ok=True)

    example_grid = torch.tensor([[2, 4, 6]])  # no grid value special (0 or 1) to fold away
    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    example = (torch.zeros(int(example_grid.prod()), patch_dim), example_grid)
    t0 = time.perf_counter()
    _torch_export(graph_module(visual), example, graph, exporter, opset)
    export_s = time.perf_counter() - t0
    checks = verify(graph, visual, _model_pixel_limits(model_dir))

    meta = EncoderMeta(
        model_id=str(cfg.get("_name_or_path") or model_dir.name),
        architecture=architecture_of(cfg), model_type=cfg["model_type"],
        patch_size=vc.patch_size, merge_size=vc.spatial_merge_size,
        temporal_patch_size=vc.temporal_patch_size, in_channels=vc.in_channels,
        embed_dim=vc.embed_dim, hidden_size=vc.hidden_size,
        vision_config_sha256=vision_config_sha(cfg), weights_fingerprint=weights_fingerprint(model_dir),
        opset=opset, exporter=exporter.label,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
        export_s=round(export_s, 3), graph_bytes=_graph_bytes(graph),
        max_abs_diff=max(c.max_abs_diff for c in checks), checks=checks,
        attention=exporter.attention,
    )
    meta.write(out_dir)
    return graph


def _torch_export(module: Any, example: tuple[Any, Any], graph: Path, exporter: Exporter,
                  opset: int) -> None:
    """``torch.onnx.export`` with the number of patches and of images left dynamic."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        if exporter is Exporter.DYNAMO:
            dim = torch.export.Dim
            torch.onnx.export(module, example, str(graph), dynamo=True, opset_version=opset,
                              verbose=False, input_names=list(INPUT_NAMES),
                              output_names=[OUTPUT_NAME],
                              dynamic_shapes={"pixel_values": {0: dim("num_patches")},
                                              "image_grid_thw": None})
        else:
            # It warns that it is the legacy exporter; it is also the one needing fewest packages.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(module, example, str(graph), dynamo=False, opset_version=opset,
                              input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                              dynamic_axes={"pixel_values": {0: "num_patches"},
                                            OUTPUT_NAME: {0: "num_tokens"}},
                              custom_opsets={CONTRIB_DOMAIN: 1})


def _model_pixel_limits(model_dir: Path) -> tuple[int, int]:
    pre = Path(model_dir) / "preprocessor_config.json"
    raw = json.loads(pre.read_text()) if pre.exists() else {}
    return int(raw.get("min_pixels", 56 * 56)), int(raw.get("max_pixels", 1280 * 28 * 28))


def _external_data(graph: Path) -> Path:
    """Where the dynamo exporter puts the weights (always, even for a small graph)."""
    return graph.with_name(graph.name + ".data")


def _graph_bytes(graph: Path) -> int:
    """The graph and its external-data file, if any."""
    return sum(f.stat().st_size for f in (graph, _external_data(graph)) if f.exists())
