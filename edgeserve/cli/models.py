"""``edgeserve models``: build and inspect the offline models."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, help_: str) -> None:
    p = sub.add_parser("models", help=help_, description="Build and inspect the offline models.")
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    b = msub.add_parser(
        "build-tiny",
        help="build the tiny random-weight Qwen2-VL (default model) offline",
        description="Build, deterministically and offline, a tiny random-weight Qwen2-VL "
        "(config, tokenizer with the Qwen chat template, preprocessor config, weights). "
        "Its outputs are meaningless text; its token counts and pipeline are real. "
        "Skips the build when an identical one is already there.",
    )
    b.add_argument("--out", type=Path, default=None, help="output folder (default: models/tiny-qwen2-vl)")
    b.add_argument("--force", action="store_true", help="rebuild even if up to date")
    b.set_defaults(func=_build_tiny)
    i = msub.add_parser("info", help="print a model folder's architecture and image settings")
    i.add_argument("path", type=Path, nargs="?", default=None, help="model folder (default: the tiny model)")
    i.set_defaults(func=_info)


def _build_tiny(args: argparse.Namespace) -> int:
    from models.tiny_qwen2_vl import DEFAULT_DIR, build

    out = build(args.out or DEFAULT_DIR, force=args.force)
    print(f"tiny Qwen2-VL ready in {out}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from models.tiny_qwen2_vl import DEFAULT_DIR

    path: Path = args.path or DEFAULT_DIR
    cfg_file, pre_file = path / "config.json", path / "preprocessor_config.json"
    if not cfg_file.exists():
        print(f"edgeserve models info: no config.json in {path} "
              "(build the default with `edgeserve models build-tiny`)", file=sys.stderr)
        return 2
    cfg = json.loads(cfg_file.read_text())
    pre = json.loads(pre_file.read_text()) if pre_file.exists() else {}
    text, vision = cfg.get("text_config", cfg), cfg.get("vision_config", {})
    print(f"model:        {path}")
    print(f"architecture: {', '.join(cfg.get('architectures', ['?']))}")
    print(f"language:     {text.get('num_hidden_layers')} layers, hidden {text.get('hidden_size')}, "
          f"vocab {text.get('vocab_size')}")
    print(f"vision:       depth {vision.get('depth')}, embed {vision.get('embed_dim')}, "
          f"patch {vision.get('patch_size')}, merge {vision.get('spatial_merge_size')}")
    print(f"images:       min_pixels {pre.get('min_pixels')}, max_pixels {pre.get('max_pixels')}")
    return 0
