"""The public API: output layout and buffers, probing, timings, backends, sources."""

from __future__ import annotations

import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, synthetic_rgb, with_orientation
from PIL import Image

import mm_preproc
from mm_preproc import Backend, OutputFormat, opencv_decode
from mm_preproc.constants import IMAGE_MEAN, IMAGE_STD, PATCH_DIM
from mm_preproc.decode import decode, open_bytes, to_rgb

MAX_PIXELS = 1280 * 28 * 28


def test_the_patch_layout_of_one_merged_block() -> None:
    """A 56×56 image is one 2×2 block of 14×14 patches, ordered top-left, top-right,
    bottom-left, bottom-right; each row holds channel 0 twice (two frames), then channel 1
    twice, then channel 2 twice."""
    image = np.random.default_rng(3).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    r = mm_preproc.preprocess(image, output="uint8", min_pixels=56 * 56)
    assert r.image_grid_thw.tolist() == [[1, 4, 4]]
    assert r.pixel_values.shape == (16, PATCH_DIM) and r.pixel_values.dtype == np.uint8
    top_right = r.pixel_values[1].reshape(3, 2, 14, 14)
    for c in range(3):
        for t in range(2):
            np.testing.assert_array_equal(top_right[c, t], r.image[0:14, 14:28, c])


def test_uint8_and_float32_outputs_are_the_same_patches_before_and_after_normalizing() -> None:
    data = encode(Image.fromarray(synthetic_rgb(800, 600)), "PNG")
    f32 = mm_preproc.preprocess(data)
    u8 = mm_preproc.preprocess(data, output=OutputFormat.UINT8)
    img = mm_preproc.preprocess(data, output="image")
    mean = np.repeat(np.asarray(IMAGE_MEAN, np.float32), 2 * 196)
    std = np.repeat(np.asarray(IMAGE_STD, np.float32), 2 * 196)
    expected = (u8.pixel_values.astype(np.float32) / 255 - mean) / std
    np.testing.assert_allclose(f32.pixel_values, expected, atol=1e-5)
    np.testing.assert_array_equal(img.pixel_values, f32.image)
    assert img.pixel_values.shape == (f32.target_height, f32.target_width, 3)


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_output_spec_predicts_shape_dtype_bytes_and_grid(fmt: OutputFormat) -> None:
    data = encode(Image.fromarray(synthetic_rgb(1000, 700)), "JPEG", quality=90)
    header = mm_preproc.probe(data)
    h, w = mm_preproc.target_size(header.height, header.width, max_pixels=MAX_PIXELS)
    spec = mm_preproc.output_spec(h, w, fmt)
    r = mm_preproc.preprocess(data, max_pixels=MAX_PIXELS, output=fmt)
    assert r.pixel_values.shape == spec.shape
    assert r.pixel_values.dtype == spec.dtype
    assert r.pixel_values.nbytes == spec.nbytes
    assert r.image_grid_thw.tolist() == [list(spec.grid_thw)]
    assert spec.num_tokens * 4 == spec.num_patches == h * w // (14 * 14)


def test_plan_gives_the_output_of_preprocess_from_the_header_alone() -> None:
    data = with_orientation(Image.fromarray(synthetic_rgb(2000, 1000)), 8)
    for output in OutputFormat:
        p = mm_preproc.plan(data[:2048], max_pixels=MAX_PIXELS, output=output)
        r = mm_preproc.preprocess(data, max_pixels=MAX_PIXELS, output=output)
        assert (p.header.width, p.header.height) == (1000, 2000)
        assert (p.target_height, p.target_width) == (r.target_height, r.target_width)
        assert (p.spec.shape, p.spec.dtype) == (r.pixel_values.shape, r.pixel_values.dtype)
    with pytest.raises(mm_preproc.AspectRatioError):
        mm_preproc.plan(encode(Image.fromarray(synthetic_rgb(1000, 4)), "PNG"))


def test_out_writes_into_shared_memory_without_a_copy() -> None:
    data = encode(Image.fromarray(synthetic_rgb(1200, 900)), "JPEG", quality=90)
    spec = mm_preproc.plan(data).spec
    shm = shared_memory.SharedMemory(create=True, size=spec.nbytes)
    try:
        view = np.ndarray(spec.shape, dtype=spec.dtype, buffer=shm.buf)
        r = mm_preproc.preprocess(data, out=view)
        assert np.shares_memory(r.pixel_values, view)
        np.testing.assert_array_equal(view, mm_preproc.preprocess(data).pixel_values)
        # A flat buffer of the right size works too (the runtime may hand out 1-D views).
        flat = np.ndarray((spec.shape[0] * spec.shape[1],), dtype=spec.dtype, buffer=shm.buf)
        assert np.shares_memory(mm_preproc.preprocess(data, out=flat).pixel_values, view)
        del view, flat, r
    finally:
        shm.close()
        shm.unlink()


def test_probe_reads_only_the_header(tmp_path: Path) -> None:
    source = Image.fromarray(synthetic_rgb(4000, 3000))
    data = with_orientation(source, 6)  # rotated 90°: displayed 3000 wide, 4000 high
    header = mm_preproc.probe(data[:4096])  # the header alone suffices
    assert (header.width, header.height, header.format) == (3000, 4000, "JPEG")
    assert (header.stored_width, header.stored_height, header.orientation) == (4000, 3000, 6)
    (tmp_path / "photo.jpg").write_bytes(data)
    assert mm_preproc.probe(tmp_path / "photo.jpg") == mm_preproc.probe(data)
    start = time.perf_counter()
    for _ in range(100):
        mm_preproc.probe(data)
    assert (time.perf_counter() - start) / 100 < 0.005  # header parsing, not a 12 MP decode


def test_timings_and_sizes_describe_a_12mp_photo(photo_12mp: bytes) -> None:
    start = time.perf_counter()
    fast = mm_preproc.preprocess(photo_12mp, max_pixels=MAX_PIXELS)
    wall_s = time.perf_counter() - start
    t = fast.timings
    stages = (t.decode_s, t.color_s, t.resize_s, t.patchify_s, t.normalize_s)
    assert all(s >= 0 for s in stages) and t.decode_s > 0 and t.resize_s > 0
    assert t.total_s == pytest.approx(sum(stages)) and t.total_s <= wall_s
    assert (t.bytes_in, t.pixels_in, t.pixels_out) == (len(photo_12mp), 12_000_000, 840 * 1148)
    # 12 MP → 0.96 MP: the JPEG is decoded at 1/2 scale in the DCT domain.
    assert (fast.decoded_width, fast.decoded_height) == (2000, 1500)
    assert t.pixels_decoded == 3_000_000
    faithful = mm_preproc.preprocess(photo_12mp, max_pixels=MAX_PIXELS, fast_decode=False)
    assert faithful.timings.pixels_decoded == 12_000_000
    assert set(t.as_dict()) >= {"decode_s", "resize_s", "normalize_s", "bytes_in", "total_s"}


def test_backends_report_which_library_decoded_and_resized() -> None:
    jpeg = encode(Image.fromarray(synthetic_rgb(900, 600)), "JPEG", quality=90)
    png = encode(Image.fromarray(synthetic_rgb(900, 600)), "PNG")
    gif = encode(Image.fromarray(synthetic_rgb(90, 60)).quantize(32), "GIF")
    for data in (jpeg, png):
        auto = mm_preproc.preprocess(data)
        assert (auto.decoder, auto.resizer) == (Backend.PILLOW, Backend.PILLOW)
        assert mm_preproc.preprocess(data, backend="opencv").decoder is Backend.OPENCV
    cv = mm_preproc.preprocess(jpeg, backend=Backend.OPENCV)
    assert (cv.decoder, cv.resizer) == (Backend.OPENCV, Backend.OPENCV)
    # Palette images need Pillow's conversion whatever the backend.
    assert mm_preproc.preprocess(gif, backend="opencv").decoder is Backend.PILLOW


@pytest.mark.parametrize(
    "label",
    ["jpeg 4:2:0", "jpeg 4:4:4", "jpeg progressive", "jpeg gray", "png", "png gray", "bmp"],
)
def test_opencv_decodes_the_same_pixels_as_pillow(label: str) -> None:
    """Why the decoders are interchangeable: identical pixels, at every JPEG DCT scale."""
    im = Image.fromarray(synthetic_rgb(999, 751))
    kind, _, variant = label.partition(" ")
    if variant == "gray":
        im = im.convert("L")
    options = {
        "4:2:0": {"quality": 90},
        "4:4:4": {"quality": 95, "subsampling": 0},
        "progressive": {"quality": 85, "progressive": True},
    }.get(variant, {"quality": 90} if kind == "jpeg" else {})
    data = encode(im, kind.upper(), **options)
    pil_im, header = open_bytes(data)
    assert pil_im is not None and opencv_decode.can_decode(header)
    for scale in (1, 2, 4, 8) if kind == "jpeg" else (1,):
        by_pillow = np.asarray(to_rgb(decode(open_bytes(data)[0], header, scale)))  # type: ignore[arg-type]
        by_opencv = opencv_decode.decode_opencv(data, header, scale)
        np.testing.assert_array_equal(by_opencv, by_pillow)


def test_sources_bytes_path_memoryview_give_the_same_result(tmp_path: Path) -> None:
    data = encode(Image.fromarray(synthetic_rgb(500, 400)), "PNG")
    (tmp_path / "a.png").write_bytes(data)
    ref = mm_preproc.preprocess(data).pixel_values
    for source in (tmp_path / "a.png", str(tmp_path / "a.png"), memoryview(data), bytearray(data)):
        np.testing.assert_array_equal(mm_preproc.preprocess(source).pixel_values, ref)


def test_an_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (280, 280), color) for color in ((200, 0, 0), (0, 0, 200))]
    buf_path = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    r = mm_preproc.preprocess(buf_path, min_pixels=280 * 280, max_pixels=280 * 280)
    assert r.image.shape == (280, 280, 3)
    red = r.image.reshape(-1, 3).mean(axis=0)
    assert red[0] > 150 and red[2] < 50


def test_options_object_replaces_keywords() -> None:
    data = encode(Image.fromarray(synthetic_rgb(1000, 1000)), "PNG")
    options = mm_preproc.PreprocOptions(max_pixels=64 * 28 * 28, output=OutputFormat.UINT8)
    r = mm_preproc.preprocess(data, options=options)
    assert r.pixel_values.dtype == np.uint8
    assert r.target_height * r.target_width <= 64 * 28 * 28
    with pytest.raises(mm_preproc.InvalidArgumentError):
        mm_preproc.PreprocOptions(resized_height=100)


def _fill_segment(segment_name: str, data: bytes) -> tuple[int, int]:
    """Worker-process side: attach to the segment by name and preprocess into it."""
    segment = shared_memory.SharedMemory(name=segment_name)
    try:
        spec = mm_preproc.plan(data).spec
        out = np.ndarray(spec.shape, dtype=spec.dtype, buffer=segment.buf)
        r = mm_preproc.preprocess(data, out=out)
        del out
        return r.target_height, r.target_width
    finally:
        segment.close()


def test_worker_processes_write_results_into_segments_the_parent_sized() -> None:
    """The runtime's hand-off: the parent plans from the header and creates a segment, a
    worker process (spawned, not forked) decodes into it, the parent reads the arrays."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    images = [
        encode(Image.fromarray(synthetic_rgb(w, h, seed=w)), fmt, **kw)
        for w, h, fmt, kw in [(1600, 1200, "JPEG", {"quality": 90}), (700, 900, "PNG", {})]
    ]
    segments = [
        shared_memory.SharedMemory(create=True, size=mm_preproc.plan(d).spec.nbytes) for d in images
    ]
    try:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            sizes = list(pool.map(_fill_segment, [s.name for s in segments], images))
        for data, segment, size in zip(images, segments, sizes, strict=True):
            expected = mm_preproc.preprocess(data)
            assert size == (expected.target_height, expected.target_width)
            view = np.ndarray(expected.pixel_values.shape, np.float32, buffer=segment.buf)
            np.testing.assert_array_equal(view, expected.pixel_values)
            del view
    finally:
        for segment in segments:
            segment.close()
            segment.unlink()


@pytest.mark.parametrize(("height", "width"), [(56, 56), (84, 140), (840, 1148)])
def test_patch_planes_match_the_processors_reshape_and_transpose(height: int, width: int) -> None:
    """The 42-byte-row gather + channel split equals transformers' patchify (one frame)."""
    from mm_preproc.patchify import patch_planes

    image = np.random.default_rng(height).integers(0, 256, (height, width, 3), dtype=np.uint8)
    gh, gw = height // 14, width // 14
    expected = (
        image.reshape(gh // 2, 2, 14, gw // 2, 2, 14, 3)
        .transpose(0, 3, 1, 4, 6, 2, 5)
        .reshape(gh * gw, 3, 196)
    )
    planes = patch_planes(image)
    np.testing.assert_array_equal(planes.transpose(1, 0, 2), expected)
    flipped = patch_planes(image[::-1])  # a non-contiguous view (EXIF orientation makes these)
    np.testing.assert_array_equal(
        flipped.transpose(1, 0, 2),
        np.ascontiguousarray(image[::-1])
        .reshape(gh // 2, 2, 14, gw // 2, 2, 14, 3)
        .transpose(0, 3, 1, 4, 6, 2, 5)
        .reshape(gh * gw, 3, 196),
    )
