"""The output/scratch buffer pool: reuses only what nobody references and stays bounded.

(Its purpose, fewer first-touch page faults per image, is measured in docs/mm_preproc.md; the
count depends on the allocator's state, so it is not asserted here.)"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from conftest import encode, synthetic_rgb
from PIL import Image

import mm_preproc
from mm_preproc.buffers import POOL, BufferPool, set_pool_limit

MAX_PIXELS = 1280 * 28 * 28


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [
        encode(Image.fromarray(synthetic_rgb(1600, 1200, seed=s)), "JPEG", quality=90)
        for s in range(2)
    ]


@pytest.fixture
def default_pool() -> Iterator[None]:
    limit = POOL.max_bytes
    yield
    set_pool_limit(limit)


def test_a_live_result_is_never_overwritten_by_later_calls(jpegs: list[bytes]) -> None:
    first = mm_preproc.preprocess(jpegs[0], max_pixels=MAX_PIXELS)
    kept = first.pixel_values.copy()
    for _ in range(3):
        other = mm_preproc.preprocess(jpegs[1], max_pixels=MAX_PIXELS)
        assert not np.shares_memory(other.pixel_values, first.pixel_values)
    np.testing.assert_array_equal(first.pixel_values, kept)


@pytest.mark.parametrize("holder", ["slice", "memoryview", "image-format"])
def test_anything_still_viewing_a_result_keeps_its_buffer_out_of_the_pool(
    jpegs: list[bytes], holder: str
) -> None:
    fmt = "image" if holder == "image-format" else "float32"
    r = mm_preproc.preprocess(jpegs[0], max_pixels=MAX_PIXELS, output=fmt)
    kept = r.pixel_values.copy()
    view: object = memoryview(r.pixel_values) if holder == "memoryview" else r.pixel_values[3:9]
    del r
    for _ in range(3):
        other = mm_preproc.preprocess(jpegs[1], max_pixels=MAX_PIXELS, output=fmt)
        assert not np.shares_memory(other.pixel_values, np.asarray(view))
    np.testing.assert_array_equal(np.asarray(view), kept[3:9] if holder != "memoryview" else kept)


def test_a_dropped_result_s_buffer_is_reused(jpegs: list[bytes]) -> None:
    r = mm_preproc.preprocess(jpegs[0], max_pixels=MAX_PIXELS)
    address = r.pixel_values.ctypes.data
    del r
    again = mm_preproc.preprocess(jpegs[1], max_pixels=MAX_PIXELS)
    assert again.pixel_values.ctypes.data == address


def test_the_pool_stays_within_its_bound_while_results_are_kept() -> None:
    pool = BufferPool(max_bytes=10_000)
    kept = [pool.empty((1000,), np.float32) for _ in range(5)]  # 4,000 bytes each
    assert pool.nbytes <= 10_000
    assert len({a.ctypes.data for a in kept}) == 5  # all distinct, pooled or not
    big = pool.empty((20_000,), np.uint8)  # over the bound: a plain array
    assert big.base is None and pool.nbytes <= 10_000
    del kept
    reused = pool.empty((900,), np.float32)
    assert reused.base is not None and pool.nbytes <= 10_000


def test_limit_zero_disables_pooling(jpegs: list[bytes], default_pool: None) -> None:
    set_pool_limit(0)
    assert POOL.nbytes == 0
    r = mm_preproc.preprocess(jpegs[0], max_pixels=MAX_PIXELS)
    assert POOL.nbytes == 0 and r.pixel_values.shape[1] == 1176
    with pytest.raises(mm_preproc.InvalidArgumentError):
        set_pool_limit(-1)
