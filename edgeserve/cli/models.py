"""``edgeserve models``: build and inspect the offline models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, help_: str) -> None:
    p = sub.add_parser("models", help=help_, description="Build, inspect and export the offline models.")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    b = msub.add_parser(
        "build-tiny",
        help="build a tiny random-weight Qwen-VL model offline (default: the Qwen2-VL default model)",
        description="Build, deterministically and offline, a tiny random-weight model of a Qwen-VL "
        "family (config, tokenizer with the family's chat template and Qwen's special tokens, "
        "preprocessor config, weights): qwen2_vl (the default model, models/tiny-qwen2-vl), "
        "qwen2_5_vl (window-attention tower, models/tiny-qwen2.5-vl), qwen3_vl (16-px patches, "
        "deepstack, models/tiny-qwen3-vl) or qwen3_5 (Qwen3-VL's tower, a hybrid Gated DeltaNet + "
        "attention language model, models/tiny-qwen3.5). Its outputs are meaningless text; its token counts "
        "and pipeline are real. Skips the build when an identical one is already there.",
    )
    b.add_argument("--family", choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"],
                   default="qwen2_vl",
                   help="model family (default: qwen2_vl)")
    b.add_argument("--out", type=Path, default=None,
                   help="output folder (default: models/tiny-<family>, e.g. models/tiny-qwen2-vl)")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.set_defaults(func=_build_tiny)
    r = msub.add_parser(
        "build-random",
        help="write a published checkpoint's architecture without weights (served with random ones)",
        description="Write a model folder with the real architecture of a published Qwen-VL "
        "checkpoint (config.json with its published values, a tokenizer with the real vocabulary "
        "size, chat template, processor configs) and no weight files. `edgeserve serve` and "
        "`vllm serve --load-format dummy` serve it with random weights: outputs are meaningless "
        "text, step times and memory are the real model's. Image bounds capped at 1280 tokens.",
    )
    r.add_argument("shape", metavar="SHAPE", help=f"one of: {', '.join(_shape_names())}")
    r.add_argument("--out", type=Path, required=True, help="output folder (replaced)")
    r.set_defaults(func=_build_random)
    i = msub.add_parser("info", help="print a model folder's architecture and image settings")
    i.add_argument("path", type=Path, nargs="?", default=None, help="model folder (default: the tiny model)")
    i.set_defaults(func=_info)
    e = msub.add_parser(
        "export-encoder",
        help="export a Qwen2-VL model's vision tower to ONNX and verify it",
        description="Export a Qwen2-VL model's vision tower (patch embed, blocks, merger) to one "
        "ONNX graph, encoder.onnx: inputs pixel_values float32 (patches, 1176) and image_grid_thw "
        "int64 (images, 3), output image_embeds float32 (patches / 4, language-model hidden) — what "
        "vLLM accepts as precomputed image embeddings — with any number of patches and images. "
        "The graph is then run in ONNX Runtime (CPU) on images of 224x224, 448x336 and 644x476 "
        "pixels and a two-image batch and compared with transformers' own tower (float32, eager "
        "attention); encoder.json, written last beside the graph, records the model, patch "
        "geometry, opset, exporter and the differences. Needs torch, transformers and onnx "
        "(and onnxscript for --exporter dynamo). Qwen2.5-VL and Qwen3-VL towers are not handled.",
    )
    e.add_argument("path", type=Path, nargs="?", default=None, metavar="MODEL_DIR",
                   help="Qwen2-VL model folder (default: the tiny model, models/tiny-qwen2-vl)")
    e.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="output folder (default: MODEL_DIR/onnx)")
    e.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                   help="torch.onnx.export path: TorchScript with dynamic_axes (default) or "
                   "torch.export (dynamo=True)")
    e.add_argument("--opset", type=int, default=18, help="ONNX opset (default: 18)")
    e.add_argument("--tolerance", type=float, default=1e-4,
                   help="exit 1 when a max abs diff exceeds this fraction of the largest "
                   "|embedding| in its check (default: 1e-4)")
    e.add_argument("--threads", type=int, default=1,
                   help="torch threads for the export and the reference tower (default: 1)")
    e.set_defaults(func=_export_encoder)


def _build_tiny(args: argparse.Namespace) -> int:
    from mm_preproc.spec import Family
    from models.tiny_qwen_vl import build_family

    family = Family(args.family)
    out = build_family(family, args.out, force=args.force)
    print(f"tiny {family.display_name} ready in {out}")
    return 0


def _shape_names() -> list[str]:
    from models.random_shapes import SHAPES

    return list(SHAPES)


def _build_random(args: argparse.Namespace) -> int:
    from models.random_shapes import UnknownShapeError, build, shape

    try:
        s = shape(args.shape)
    except UnknownShapeError as e:
        print(f"edgeserve models build-random: {e}", file=sys.stderr)
        return 2
    out = build(s.name, args.out)
    print(f"{s.name} ({s.checkpoint}, {s.published_params / 1e9:.2f} B parameters, no weights) "
          f"ready in {out}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from models.tiny_qwen2_vl import DEFAULT_DIR

    path: Path = args.path or DEFAULT_DIR
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        print(f"edgeserve models info: no config.json in {path} "
              "(build the default with `edgeserve models build-tiny`)", file=sys.stderr)
        return 2
    cfg = json.loads(cfg_file.read_text())
    text, vision = cfg.get("text_config", cfg), cfg.get("vision_config", {})
    print(f"model:        {path}")
    print(f"architecture: {', '.join(cfg.get('architectures', ['?']))}")
    print(f"language:     {text.get('num_hidden_layers')} layers, hidden {text.get('hidden_size')}, "
          f"vocab {text.get('vocab_size')}")
    print(f"vision:       depth {vision.get('depth')}, "
          f"embed {vision.get('embed_dim') or vision.get('hidden_size')}, "
          f"patch {vision.get('patch_size')}, merge {vision.get('spatial_merge_size')}")
    from mm_preproc.spec import SpecError, read_spec

    try:
        spec = read_spec(path)
        print(f"family:       {spec.family.display_name} ({spec.family.value})")
        print(f"images:       min_pixels {spec.min_pixels}, max_pixels {spec.max_pixels}, "
              f"one token per {spec.factor}x{spec.factor} px, mean {list(spec.image_mean)}, "
              f"std {list(spec.image_std)}")
    except SpecError as e:
        print(f"images:       not a family edgeserve preprocesses ({e})")
    return 0


def _export_encoder(args: argparse.Namespace) -> int:
    from models.onnx_encoder import EncoderMeta, NotQwen2VLError, export_encoder, read_model_config
    from models.tiny_qwen2_vl import DEFAULT_DIR

    path: Path = args.path or DEFAULT_DIR
    try:
        read_model_config(path)  # fail before importing torch
    except NotQwen2VLError as e:
        hint = " (build the default with `edgeserve models build-tiny`)" if args.path is None else ""
        print(f"edgeserve models export-encoder: {e}{hint}", file=sys.stderr)
        return 2
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    try:
        graph = export_encoder(path, args.out or path / "onnx", exporter=args.exporter,
                               opset=args.opset)
    except (ImportError, OSError, NotQwen2VLError) as e:  # a folder or set-up problem, not a bug
        print(f"edgeserve models export-encoder: {e}", file=sys.stderr)
        return 2
    meta = EncoderMeta.read(graph)
    print(f"encoder graph: {graph} ({meta.graph_bytes / 1e6:.1f} MB)")
    print(f"metadata:      {graph.with_name('encoder.json')}")
    print(f"exporter:      {meta.exporter}, opset {meta.opset}, {meta.export_s:.1f} s")
    print("verified against transformers' tower (float32, eager attention) in ONNX Runtime:")
    for c in meta.checks:
        grids = " + ".join(str(g) for g in c.grid_thw)
        print(f"  grid {grids:<28} {c.tokens:>6} tokens  max abs diff {c.max_abs_diff:.2e} "
              f"(largest |value| {c.max_abs_ref:.3g})")
    print(f"max abs diff:  {meta.max_abs_diff:.2e}")
    if failed := meta.failed(args.tolerance):
        print(f"edgeserve models export-encoder: verification failed for "
              f"{', '.join(str(c.grid_thw) for c in failed)}: difference above "
              f"{args.tolerance:g} × the largest |value|", file=sys.stderr)
        return 1
    return 0
