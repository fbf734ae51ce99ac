"""The fast RGBX → RGB packing writes exactly what its specification (numpy's copy) writes."""

from __future__ import annotations

import numpy as np
import pytest

from mm_preproc.pack import pack_rgb_into, pack_rgb_into_plain


def rgbx(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 4), dtype=np.uint8)


@pytest.mark.parametrize("hw", [(840, 1148), (1, 1), (3, 5), (728, 1288)])
def test_packing_an_rgbx_image_equals_the_plain_copy(hw: tuple[int, int]) -> None:
    src = rgbx(*hw)
    fast, plain = np.empty((*hw, 3), np.uint8), np.empty((*hw, 3), np.uint8)
    pack_rgb_into(fast, src)
    pack_rgb_into_plain(plain, src)
    assert np.array_equal(fast, plain)
    assert np.array_equal(fast, src[:, :, :3])


@pytest.mark.parametrize("view", ["rot90", "flip_rows", "crop", "rgb"])
def test_other_layouts_take_the_plain_copy_and_give_the_same_bytes(view: str) -> None:
    base = rgbx(60, 80, seed=1)
    src = {"rot90": np.rot90(base), "flip_rows": base[::-1], "crop": base[5:50, 7:70],
           "rgb": np.ascontiguousarray(base[:, :, :3])}[view]
    dst = np.zeros((*src.shape[:2], 3), np.uint8)
    pack_rgb_into(dst, src)
    assert np.array_equal(dst, src[:, :, :3])


def test_a_strided_destination_is_written_in_place() -> None:
    src = rgbx(40, 30, seed=2)
    big = np.zeros((40, 60, 3), np.uint8)
    dst = big[:, ::2]  # not contiguous: OpenCV cannot write into it
    pack_rgb_into(dst, src)
    assert np.array_equal(big[:, ::2], src[:, :, :3]) and not big[:, 1::2].any()
