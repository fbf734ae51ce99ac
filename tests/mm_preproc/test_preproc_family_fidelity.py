"""Every Qwen-VL family's images come out as that family's own image processor makes them.

Each family gets a model folder holding its published checkpoint's ``preprocessor_config.json``
(verbatim values) and a ``config.json`` naming its ``model_type``. :func:`mm_preproc.read_spec`
reads the folder; the reference is the image processor transformers itself loads from the same
folder (``AutoImageProcessor``, PIL backend and torchvision backend). The bounds are the
Qwen2-VL ones (test_preproc_fidelity.py): ``image_grid_thw`` identical, faithful path max
|difference| ≤ 1e-5, fast path mean |difference| ≤ 0.01, in normalized units.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, photo_jpeg, record, synthetic_rgb
from PIL import Image

import mm_preproc
from mm_preproc import reference
from mm_preproc.spec import CLIP_MEAN, CLIP_STD, Family, PreprocSpec

FAITHFUL_MAX_ABS = 1e-5
FAST_MEAN_ABS = 0.01

# The checkpoints' own files (https://huggingface.co/<repo>/blob/main/preprocessor_config.json).
PUBLISHED: dict[Family, tuple[dict[str, object], dict[str, object]]] = {
    Family.QWEN2_VL: (  # Qwen/Qwen2-VL-7B-Instruct
        {"model_type": "qwen2_vl", "vision_config": {"patch_size": 14, "spatial_merge_size": 2}},
        {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
         "merge_size": 2, "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD),
         "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"},
    ),
    Family.QWEN2_5_VL: (  # Qwen/Qwen2.5-VL-7B-Instruct
        {"model_type": "qwen2_5_vl", "vision_config": {"patch_size": 14, "spatial_merge_size": 2}},
        {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
         "merge_size": 2, "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD),
         "image_processor_type": "Qwen2VLImageProcessor",
         "processor_class": "Qwen2_5_VLProcessor"},
    ),
    Family.QWEN3_VL: (  # Qwen/Qwen3-VL-8B-Instruct
        {"model_type": "qwen3_vl", "vision_config": {"patch_size": 16, "spatial_merge_size": 2}},
        {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
         "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
         "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
         "image_processor_type": "Qwen2VLImageProcessorFast"},
    ),
    Family.QWEN3_5: (  # as Qwen3-VL's (see mm_preproc.spec: not checked against a Qwen3.5 file)
        {"model_type": "qwen3_5", "vision_config": {"patch_size": 16, "spatial_merge_size": 2}},
        {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
         "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
         "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
         "image_processor_type": "Qwen2VLImageProcessorFast"},
    ),
}
FAMILIES = list(PUBLISHED)
BACKENDS = ["pil", "torchvision"] if reference.torchvision_available() else ["pil"]


def write_folder(folder: Path, config: dict[str, object], pre: dict[str, object] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if pre is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[Family, Path]:
    root = tmp_path_factory.mktemp("families")
    return {f: write_folder(root / f.value, *PUBLISHED[f]) for f in FAMILIES}


# -- the spec a folder gives ----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_read_spec_takes_the_published_numbers(family: Family, folders: dict[Family, Path]) -> None:
    spec = mm_preproc.read_spec(folders[family])
    pre = PUBLISHED[family][1]
    assert spec.family is family
    assert (spec.patch_size, spec.merge_size, spec.temporal_patch_size) == (
        pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"])
    assert list(spec.image_mean) == pre["image_mean"] and list(spec.image_std) == pre["image_std"]
    proc = reference.folder_processor(folders[family], "pil")
    assert (spec.min_pixels, spec.max_pixels) == (
        proc.size["shortest_edge"], proc.size["longest_edge"])
    assert spec.factor == (32 if family in (Family.QWEN3_VL, Family.QWEN3_5) else 28)
    assert spec.patch_dim == 3 * 2 * spec.patch_size**2


def test_the_default_spec_is_the_qwen2_vl_constants() -> None:
    from mm_preproc import constants as c

    spec = mm_preproc.PRESETS[Family.QWEN2_VL]
    assert (spec.patch_size, spec.merge_size, spec.temporal_patch_size) == (14, 2, 2)
    assert (c.FACTOR, c.PATCH_DIM) == (spec.factor, spec.patch_dim) == (28, 1176)
    assert (spec.min_pixels, spec.max_pixels) == (56 * 56, 1280 * 28 * 28)
    assert spec.image_mean == c.IMAGE_MEAN == CLIP_MEAN


def test_a_folder_without_preprocessor_config_gets_the_family_preset(tmp_path: Path) -> None:
    folder = write_folder(tmp_path, {"model_type": "qwen3_vl"}, None)
    assert mm_preproc.read_spec(folder) == mm_preproc.PRESETS[Family.QWEN3_VL]


def test_another_family_is_refused_in_one_sentence(tmp_path: Path) -> None:
    folder = write_folder(tmp_path, {"model_type": "llava", "architectures": ["LlavaForX"]}, None)
    with pytest.raises(mm_preproc.SpecError) as e:
        mm_preproc.read_spec(folder)
    text = str(e.value)
    assert "'llava'" in text and "LlavaForX" in text and "Qwen3-VL (qwen3_vl)" in text
    assert "\n" not in text


def test_a_preprocessor_that_disagrees_with_its_tower_is_refused(tmp_path: Path) -> None:
    config, pre = PUBLISHED[Family.QWEN3_VL]
    folder = write_folder(tmp_path, config, {**pre, "patch_size": 14})
    with pytest.raises(mm_preproc.SpecError, match=r"patch_size 14 .* patch_size 16"):
        mm_preproc.read_spec(folder)


def test_bad_values_fail_on_construction() -> None:
    base = mm_preproc.PRESETS[Family.QWEN2_VL]
    for bad in ({"patch_size": 0}, {"image_std": (0.5, 0.0, 0.5)}, {"image_mean": (1, 2)},
                {"min_pixels": 10, "max_pixels": 5}, {"family": "llava"}):
        with pytest.raises((mm_preproc.SpecError, ValueError)):
            PreprocSpec(**{**_fields(base), **bad})


def _fields(spec: PreprocSpec) -> dict[str, object]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


# -- pixels against the family's own processor ------------------------------------------------


def images() -> dict[str, bytes]:
    def jpeg(w: int, h: int) -> bytes:
        return encode(Image.fromarray(synthetic_rgb(w, h, seed=w ^ h)), "JPEG", quality=90)

    def png(w: int, h: int) -> bytes:
        return encode(Image.fromarray(synthetic_rgb(w, h, seed=w + h)), "PNG")

    return {
        "coffee 1920x1080 jpeg": photo_jpeg("coffee", 1920, 1080),
        "chelsea 1080x1440 jpeg": photo_jpeg("chelsea", 1080, 1440),
        "synthetic 640x480 jpeg": jpeg(640, 480),
        "synthetic 3000x1000 jpeg": jpeg(3000, 1000),
        "synthetic 300x2000 png": png(300, 2000),
        "synthetic 20x15 png (upscaled)": png(20, 15),
        "synthetic 448x448 png (multiple of 28 and 32)": png(448, 448),
        "synthetic 5000x3300 jpeg": jpeg(5000, 3300),
    }


IMAGES = images()


def check(label: str, data: bytes, folder: Path, kind: str, max_pixels: int | None) -> None:
    spec = mm_preproc.read_spec(folder)
    proc = reference.folder_processor(folder, kind)
    ref_values, ref_grid = reference.run_processor(
        proc, reference.load_like_vllm(data), None, max_pixels)
    faithful = mm_preproc.preprocess(data, spec=spec, max_pixels=max_pixels, fast_decode=False)
    fast = mm_preproc.preprocess(data, spec=spec, max_pixels=max_pixels)
    assert faithful.image_grid_thw.tolist() == ref_grid.tolist() == fast.image_grid_thw.tolist()
    assert faithful.pixel_values.shape == ref_values.shape == fast.pixel_values.shape
    tag = f"{spec.family.value} {kind}"
    assert record(label, "faithful", tag, faithful.pixel_values, ref_values).max_abs <= (
        FAITHFUL_MAX_ABS)
    assert record(label, "fast", tag, fast.pixel_values, ref_values).mean_abs <= FAST_MEAN_ABS


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("label", list(IMAGES))
def test_images_at_1280_tokens_match_the_familys_processor(
    label: str, family: Family, kind: str, folders: dict[Family, Path]
) -> None:
    spec = mm_preproc.read_spec(folders[family])
    check(label, IMAGES[label], folders[family], kind, spec.budget(1280))


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_12mp_photo_at_128_tokens_decodes_at_1_4_scale_and_matches(
    family: Family, kind: str, folders: dict[Family, Path], photo_12mp: bytes
) -> None:
    spec = mm_preproc.read_spec(folders[family])
    fast = mm_preproc.preprocess(photo_12mp, spec=spec, max_pixels=spec.budget(128))
    assert fast.decoded_width == 1000  # 1/4 scale in the DCT domain
    check("astronaut 4000x3000 128tok", photo_12mp, folders[family], kind, spec.budget(128))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_checkpoints_own_bounds_match_too(family: Family, folders: dict[Family, Path]) -> None:
    """No per-call bound: the folder's min/max pixels decide (a 640×480 image is upscaled to
    Qwen3-VL's 65536-pixel minimum only if below it; a 1080p one is kept near full size)."""
    check("coffee 1920x1080 own bounds", IMAGES["coffee 1920x1080 jpeg"], folders[family], "pil",
          None)
    check("640x480 own bounds", IMAGES["synthetic 640x480 jpeg"], folders[family], "pil", None)


@pytest.mark.parametrize("family", [Family.QWEN3_VL])
def test_uint8_and_the_numpy_path_give_the_same_patches(
    family: Family, folders: dict[Family, Path]
) -> None:
    from mm_preproc import patchify

    spec = mm_preproc.read_spec(folders[family])
    data = IMAGES["chelsea 1080x1440 jpeg"]
    native = mm_preproc.preprocess(data, spec=spec).pixel_values.copy()
    old = patchify.set_native(False)
    try:
        numpy_path = mm_preproc.preprocess(data, spec=spec).pixel_values.copy()
    finally:
        patchify.set_native(old)
    assert np.array_equal(native, numpy_path)
    raw = mm_preproc.preprocess(data, spec=spec, output="uint8").pixel_values
    scale, bias = spec.scale_bias()
    n = raw.shape[0]
    again = (raw.reshape(n, 3, -1).astype(np.float32) * np.float32(scale[0]) + np.float32(bias[0]))
    assert np.abs(again.reshape(n, -1) - native).max() <= 1e-6
    plan = mm_preproc.plan(data, spec=spec)
    assert plan.spec.shape == native.shape and plan.spec.num_tokens == n // 4
