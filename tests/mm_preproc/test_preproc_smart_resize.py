"""smart_resize: the target size rule, identical to transformers' and qwen-vl-utils'."""

from __future__ import annotations

import itertools
import random

import pytest
from qwen_vl_utils.vision_process import smart_resize as qvu_smart_resize
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    smart_resize as hf_smart_resize,
)

from mm_preproc import AspectRatioError, InvalidArgumentError, ResizeRule, smart_resize, target_size
from mm_preproc.constants import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, MODEL_CONFIG_MAX_PIXELS

LIMITS = [
    (DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS),
    (4 * 28 * 28, MODEL_CONFIG_MAX_PIXELS),
    (256 * 28 * 28, 256 * 28 * 28),
    (56 * 56, 64 * 28 * 28),
]


def _sizes() -> list[tuple[int, int]]:
    rng = random.Random(1234)
    edges = [1, 13, 14, 15, 27, 28, 29, 41, 42, 55, 56, 57, 100, 333, 480, 640, 1080, 1920, 4000]
    sizes = [(h, w) for h, w in itertools.product(edges, edges) if max(h, w) / min(h, w) <= 200]
    sizes += [(rng.randint(1, 9000), rng.randint(1, 9000)) for _ in range(3000)]
    return [(h, w) for h, w in sizes if max(h, w) / min(h, w) <= 200]


def test_a_12mp_photo_becomes_840_by_1148() -> None:
    assert smart_resize(3000, 4000, max_pixels=1280 * 28 * 28) == (840, 1148)


@pytest.mark.parametrize(("min_pixels", "max_pixels"), LIMITS)
def test_identical_to_transformers_for_thousands_of_sizes(min_pixels: int, max_pixels: int) -> None:
    for h, w in _sizes():
        ours = smart_resize(h, w, min_pixels=min_pixels, max_pixels=max_pixels)
        assert ours == hf_smart_resize(h, w, 28, min_pixels, max_pixels), (h, w)


@pytest.mark.parametrize(("min_pixels", "max_pixels"), LIMITS)
def test_identical_to_qwen_vl_utils_with_its_rule(min_pixels: int, max_pixels: int) -> None:
    rule = ResizeRule.QWEN_VL_UTILS
    for h, w in _sizes():
        ours = smart_resize(h, w, min_pixels=min_pixels, max_pixels=max_pixels, rule=rule)
        assert ours == qvu_smart_resize(h, w, 28, min_pixels, max_pixels), (h, w)


def test_the_two_rules_differ_only_for_very_small_or_thin_images() -> None:
    # transformers rounds a 10-pixel side to 0, then scales up to min_pixels;
    # qwen-vl-utils clamps it to 28 first and keeps the long side.
    assert smart_resize(10, 1000) == (28, 560)
    assert smart_resize(10, 1000, rule=ResizeRule.QWEN_VL_UTILS) == (28, 1008)
    assert smart_resize(480, 640) == smart_resize(480, 640, rule=ResizeRule.QWEN_VL_UTILS)


def test_results_are_multiples_of_28_within_the_limits() -> None:
    for h, w in _sizes():
        rh, rw = smart_resize(h, w)
        assert rh % 28 == 0 and rw % 28 == 0
        assert rh * rw <= DEFAULT_MAX_PIXELS


def test_aspect_ratio_above_200_is_an_error_with_the_ratio_in_the_message() -> None:
    assert smart_resize(1, 200) == hf_smart_resize(1, 200)
    with pytest.raises(AspectRatioError, match="smaller than 200, got 201"):
        smart_resize(1, 201)
    with pytest.raises(AspectRatioError):
        smart_resize(5000, 20)


def test_bad_limits_and_sizes_are_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="min_pixels"):
        smart_resize(100, 100, min_pixels=10_000, max_pixels=5_000)
    with pytest.raises(InvalidArgumentError, match="positive"):
        smart_resize(0, 100)


def test_explicit_size_is_rounded_then_bounded_like_qwen_vl_utils_then_the_processor() -> None:
    # qwen-vl-utils rounds (500, 333) to (504, 336); the processor keeps it (within limits).
    assert target_size(3000, 4000, resized_height=500, resized_width=333) == (504, 336)
    # An explicit size beyond max_pixels is scaled down by the processor's rule.
    h, w = target_size(3000, 4000, resized_height=2000, resized_width=3000)
    assert (h, w) == hf_smart_resize(*qvu_smart_resize(2000, 3000, 28), 28)
    assert h * w <= DEFAULT_MAX_PIXELS
    with pytest.raises(InvalidArgumentError, match="both"):
        target_size(3000, 4000, resized_height=500)
