"""What one model family's image input looks like: a small typed spec, read from a model folder.

Every Qwen-VL generation feeds its vision tower the same way — resize so both sides are multiples
of ``factor = patch_size × merge_size``, rescale, normalize, cut into ``patch_size`` squares,
repeat in time ``temporal_patch_size`` times, merge ``merge_size × merge_size`` patches into one
language-model token — but with different numbers:

============  =====  =====  ========  ===========  ===========================
family        patch  merge  temporal  mean / std   pixel bounds (checkpoints)
============  =====  =====  ========  ===========  ===========================
Qwen2-VL        14     2       2      OpenAI CLIP  3136 … 12845056
Qwen2.5-VL      14     2       2      OpenAI CLIP  3136 … 12845056
Qwen3-VL        16     2       2      0.5 / 0.5    65536 … 16777216
Qwen3.5         16     2       2      0.5 / 0.5    (as Qwen3-VL, see below)
============  =====  =====  ========  ===========  ===========================

A server that resized a Qwen3-VL image to 28-px multiples would hand vLLM the wrong size (vLLM
resizes again, wasting the work) and normalize with the wrong statistics. :func:`read_spec` reads
the numbers from the folder the server is pointed at, the way transformers' processor would: the
family from ``config.json`` (``model_type``), the rest from ``preprocessor_config.json``, each
missing key taken from the family's preset below. Everything that needs them — ``mm_preproc``'s
faithful and fast paths, the server, ``benchmarks/preproc.py`` and the simulator's image-token
geometry — takes a :class:`PreprocSpec`.

Presets (:data:`PRESETS`). ``QWEN2_VL`` is the set of constants mm_preproc always had
(transformers' ``Qwen2VLImageProcessor`` class defaults: 56·56 … 1280·28·28 pixels). The others
carry their published checkpoints' ``preprocessor_config.json`` values:

* Qwen2.5-VL: https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/preprocessor_config.json
  (``min_pixels`` 3136, ``max_pixels`` 12845056, patch 14, CLIP mean/std);
* Qwen3-VL: https://huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/preprocessor_config.json
  (``size`` shortest_edge 65536 / longest_edge 16777216, patch 16, mean/std 0.5);
* Qwen3.5: transformers maps ``qwen3_5`` to the Qwen3-VL processor and a 16-px vision tower
  (``Qwen3_5VisionConfig``); the preset copies Qwen3-VL's values. Not checked against a Qwen3.5
  checkpoint's own file (no model hub here) — a folder's ``preprocessor_config.json`` wins anyway.

This module imports nothing beyond the standard library, so the simulator can use it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)


class Family(StrEnum):
    """A Qwen-VL generation, named by its ``config.json`` ``model_type``."""

    QWEN2_VL = "qwen2_vl"
    QWEN2_5_VL = "qwen2_5_vl"
    QWEN3_VL = "qwen3_vl"
    QWEN3_5 = "qwen3_5"

    @property
    def display_name(self) -> str:
        """The family's human name (``Qwen2.5-VL``)."""
        return _TITLES[self]


_TITLES = {Family.QWEN2_VL: "Qwen2-VL", Family.QWEN2_5_VL: "Qwen2.5-VL",
           Family.QWEN3_VL: "Qwen3-VL", Family.QWEN3_5: "Qwen3.5"}


class SpecError(ValueError):
    """A model folder whose image input mm_preproc cannot reproduce; the message says why."""


@dataclass(slots=True, frozen=True)
class PreprocSpec:
    """One model family's image-input numbers; validated on construction.

    ``min_pixels``/``max_pixels`` are the processor's default area bounds (a server may pass
    narrower ones per call). ``factor`` (pixels per token side) and ``patch_dim`` (values per
    flattened patch) follow from the rest.
    """

    family: Family
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float
    min_pixels: int
    max_pixels: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", Family(self.family))
        object.__setattr__(self, "image_mean", _triple(self.image_mean, "image_mean"))
        object.__setattr__(self, "image_std", _triple(self.image_std, "image_std"))
        for name in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"{name} must be a positive integer, got {value!r}")
        if self.min_pixels > self.max_pixels:
            raise SpecError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels "
                            f"({self.max_pixels})")
        if any(s <= 0 for s in self.image_std):
            raise SpecError(f"image_std must be positive, got {self.image_std}")
        if not 0 < self.rescale_factor <= 1:
            raise SpecError(f"rescale_factor must be in (0, 1], got {self.rescale_factor}")

    @property
    def factor(self) -> int:
        """Both resized sides are multiples of this (one merged token covers factor² pixels)."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Values in one flattened patch: 3 channels × temporal × patch²."""
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size

    def tokens(self, target_height: int, target_width: int) -> int:
        """Image tokens for a resized image (one per ``factor × factor`` pixels)."""
        return (target_height // self.factor) * (target_width // self.factor)

    def budget(self, tokens: int) -> int:
        """``max_pixels`` that allows ``tokens`` image tokens of this family."""
        return tokens * self.factor * self.factor

    def scale_bias(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per channel ``(rescale/std, −mean/std)``: normalized = u · scale + bias, u in 0..255."""
        scale = tuple(float(self.rescale_factor / s) for s in self.image_std)
        bias = tuple(float(-m / s) for m, s in zip(self.image_mean, self.image_std, strict=True))
        return scale, bias

    def processor_kwargs(self) -> dict[str, Any]:
        """The same numbers as keyword arguments of transformers' ``Qwen2VLImageProcessor``."""
        return {"patch_size": self.patch_size, "merge_size": self.merge_size,
                "temporal_patch_size": self.temporal_patch_size,
                "image_mean": list(self.image_mean), "image_std": list(self.image_std),
                "rescale_factor": self.rescale_factor,
                "size": {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}}

    def replace(self, **changes: Any) -> PreprocSpec:
        return replace(self, **changes)


def _triple(value: Any, name: str) -> tuple[float, float, float]:
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise SpecError(f"{name} must be three numbers, got {value!r}") from None
    if len(out) != 3 or not all(math.isfinite(v) for v in out):
        raise SpecError(f"{name} must be three finite numbers, got {value!r}")
    return out[0], out[1], out[2]


QWEN2_VL = PreprocSpec(Family.QWEN2_VL, patch_size=14, merge_size=2, temporal_patch_size=2,
                       image_mean=CLIP_MEAN, image_std=CLIP_STD, rescale_factor=1 / 255,
                       min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
QWEN2_5_VL = QWEN2_VL.replace(family=Family.QWEN2_5_VL, min_pixels=3136, max_pixels=12845056)
QWEN3_VL = PreprocSpec(Family.QWEN3_VL, patch_size=16, merge_size=2, temporal_patch_size=2,
                       image_mean=HALF, image_std=HALF, rescale_factor=1 / 255,
                       min_pixels=65536, max_pixels=16777216)
QWEN3_5 = QWEN3_VL.replace(family=Family.QWEN3_5)

PRESETS: dict[Family, PreprocSpec] = {s.family: s for s in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5)}

# config.json model_type → family (the MoE variants share their dense sibling's image input)
MODEL_TYPES: dict[str, Family] = {
    "qwen2_vl": Family.QWEN2_VL, "qwen2_5_vl": Family.QWEN2_5_VL, "qwen3_vl": Family.QWEN3_VL,
    "qwen3_vl_moe": Family.QWEN3_VL, "qwen3_5": Family.QWEN3_5, "qwen3_5_moe": Family.QWEN3_5,
}


def family_of(config: dict[str, Any], where: str = "config.json") -> Family:
    """The family a parsed ``config.json`` belongs to; :class:`SpecError` for any other model."""
    model_type = config.get("model_type")
    family = MODEL_TYPES.get(str(model_type))
    if family is None:
        names = ", ".join(f"{f.display_name} ({f.value})" for f in Family)
        archs = ", ".join(config.get("architectures") or []) or "no architectures"
        raise SpecError(f"{where} has model_type {model_type!r} ({archs}); edgeserve "
                        f"preprocesses images for {names} only.")
    return family


def read_spec(model_dir: str | Path) -> PreprocSpec:
    """The image-input spec of a model folder: family from ``config.json``, numbers from
    ``preprocessor_config.json`` (each missing key from the family's preset).

    Raises :class:`SpecError` (one sentence, naming the file) when the folder has no readable
    ``config.json``, is of another family, or its preprocessor numbers disagree with its vision
    tower (``vision_config.patch_size`` etc.) or cannot be used.
    """
    folder = Path(model_dir)
    config = _read_json(folder / "config.json", required=True)
    family = family_of(config, str(folder / "config.json"))
    pre = _read_json(folder / "preprocessor_config.json", required=False)
    spec = spec_from_preprocessor_config(family, pre, str(folder / "preprocessor_config.json"))
    vision = config.get("vision_config") or {}
    for ours, theirs in (("patch_size", "patch_size"), ("merge_size", "spatial_merge_size"),
                         ("temporal_patch_size", "temporal_patch_size")):
        tower = vision.get(theirs)
        if tower is not None and tower != getattr(spec, ours):
            raise SpecError(f"{folder / 'preprocessor_config.json'} gives {ours} "
                            f"{getattr(spec, ours)} but the vision tower in config.json has "
                            f"{theirs} {tower}; fix one of the two files.")
    return spec


def spec_from_preprocessor_config(family: Family, pre: dict[str, Any],
                                  where: str = "preprocessor_config.json") -> PreprocSpec:
    """A family's preset with the keys a ``preprocessor_config.json`` gives.

    Pixel bounds are read as transformers reads them: ``min_pixels``/``max_pixels`` when present,
    else ``size.shortest_edge``/``size.longest_edge``.
    """
    base = PRESETS[family]
    size = pre.get("size") or {}
    changes: dict[str, Any] = {}
    for name in ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std",
                 "rescale_factor"):
        if pre.get(name) is not None:
            changes[name] = pre[name]
    lo = pre.get("min_pixels") or size.get("shortest_edge")
    hi = pre.get("max_pixels") or size.get("longest_edge")
    if lo is not None:
        changes["min_pixels"] = lo
    if hi is not None:
        changes["max_pixels"] = hi
    for flag in ("do_rescale", "do_normalize", "do_resize"):
        if pre.get(flag) is False:
            raise SpecError(f"{where} sets {flag} false; mm_preproc always resizes, rescales and "
                            "normalizes as the Qwen-VL processors do by default.")
    try:
        return base.replace(**changes)
    except (SpecError, TypeError) as e:
        raise SpecError(f"{where}: {e}") from None


def _read_json(path: Path, *, required: bool) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        if required:
            raise SpecError(f"{path.parent} is not a model folder: it has no config.json.") from None
        return {}
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise SpecError(f"{path} is not valid JSON ({e}).") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path} must hold a JSON object.")
    return data

