"""What ``encoder.json`` says about an exported tower, and the names of the graph's interface.

``encoder.json`` is written last, next to the graph, once the graph was verified: a folder with
one holds a checked graph, and :meth:`EncoderMeta.mismatches` tells a server whether that graph
is its own model's tower (architecture, vision config and a fingerprint of the weights).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GRAPH_NAME = "encoder.onnx"
META_NAME = "encoder.json"
INPUT_NAMES = ("pixel_values", "image_grid_thw")
OUTPUT_NAME = "image_embeds"
SUPPORTED_MODEL_TYPES = ("qwen2_vl",)


class NotQwen2VLError(ValueError):
    """The folder is not a Qwen2-VL model this export handles."""


@dataclass(frozen=True, slots=True)
class Check:
    """One verification call: the grids fed together and the largest difference seen."""

    grid_thw: list[list[int]]
    tokens: int
    max_abs_diff: float
    max_abs_ref: float  # the scale the difference is to be read against


@dataclass(frozen=True, slots=True)
class EncoderMeta:
    """What ``encoder.json`` says about a graph: its model, geometry, interface and checks."""

    model_id: str
    architecture: str
    model_type: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    in_channels: int
    embed_dim: int
    hidden_size: int
    vision_config_sha256: str
    weights_fingerprint: str
    opset: int
    exporter: str
    torch_version: str
    transformers_version: str
    export_s: float
    graph_bytes: int
    max_abs_diff: float
    checks: list[Check] = field(default_factory=list)
    attention: str = ""  # how the graph attends (Exporter.attention); "" in older exports
    inputs: tuple[str, ...] = INPUT_NAMES
    output: str = OUTPUT_NAME
    graph: str = GRAPH_NAME

    @property
    def patch_dim(self) -> int:
        """Width of one ``pixel_values`` row: C·T·P·P (1176 for Qwen2-VL)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    def failed(self, tolerance: float) -> list[Check]:
        """Checks whose max abs diff exceeds ``tolerance`` × the largest |embedding| in them."""
        return [c for c in self.checks if c.max_abs_diff > tolerance * c.max_abs_ref]

    def mismatches(self, model_dir: Path) -> list[str]:
        """Reasons this graph is not ``model_dir``'s tower (empty when it is)."""
        cfg = read_model_config(model_dir)
        found = {"architecture": architecture_of(cfg), "vision_config_sha256": vision_config_sha(cfg),
                 "weights_fingerprint": weights_fingerprint(Path(model_dir))}
        return [f"{k}: graph has {getattr(self, k)!r}, model has {v!r}"
                for k, v in found.items() if getattr(self, k) != v]

    def write(self, out_dir: Path) -> Path:
        path = Path(out_dir) / META_NAME
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> EncoderMeta:
        """Read ``encoder.json`` (``path`` may be the file, the graph or their folder)."""
        path = Path(path)
        path = path if path.suffix == ".json" else (path.parent if path.is_file() else path) / META_NAME
        raw = json.loads(path.read_text())
        raw["checks"] = [Check(**c) for c in raw.get("checks", [])]
        raw["inputs"] = tuple(raw.get("inputs", INPUT_NAMES))
        return cls(**raw)


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """The folder's ``config.json``, or :class:`NotQwen2VLError` saying why it is not one."""
    cfg_file = Path(model_dir) / "config.json"
    if not cfg_file.is_file():
        raise NotQwen2VLError(f"no config.json in {model_dir}: not a model folder")
    try:
        cfg: dict[str, Any] = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise NotQwen2VLError(f"{cfg_file} is not valid JSON ({e})") from None
    kind = cfg.get("model_type")
    if kind not in SUPPORTED_MODEL_TYPES or "vision_config" not in cfg:
        raise NotQwen2VLError(f"{model_dir} is a {kind or 'unknown'} model, not Qwen2-VL "
                              "(only Qwen2-VL's vision tower is exported)")
    return cfg


def weights_fingerprint(model_dir: Path) -> str:
    """A cheap identity of the weights: name, size, first and last MiB of each safetensors file.

    Cheap enough for a server to check at start-up on multi-GB checkpoints; it tells apart two
    random-weight builds of one config, which a config hash cannot.
    """
    h = hashlib.sha256()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}:".encode())
        with f.open("rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def architecture_of(cfg: dict[str, Any]) -> str:
    """The model's architectures as ``config.json`` names them, comma-separated."""
    return ",".join(cfg.get("architectures") or ["?"])


def vision_config_sha(cfg: dict[str, Any]) -> str:
    """A short hash of ``vision_config``: two towers of one shape share it."""
    payload = json.dumps(cfg.get("vision_config", {}), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
