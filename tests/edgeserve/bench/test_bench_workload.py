"""Prepared request bodies: what the server receives, built before the clock starts."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgeserve.bench.workload import (
    ImageContent,
    ImageSize,
    WorkloadConfig,
    parse_output_len,
    parse_size_mix,
    prepare_requests,
)


def images_of(body: bytes) -> list[Image.Image]:
    content = json.loads(body)["messages"][0]["content"]
    urls = [c["image_url"]["url"] for c in content if c["type"] == "image_url"]
    assert all(u.startswith("data:image/jpeg;base64,") for u in urls)
    return [Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))) for u in urls]


def test_size_mixes_parse_presets_single_sizes_and_weights() -> None:
    assert parse_size_mix("12mp") == (ImageSize(4000, 3000),)
    assert parse_size_mix("640x480:2, 320x240") == (ImageSize(640, 480, 2.0), ImageSize(320, 240))


@pytest.mark.parametrize("spec", ["", "640", "640x", "0x10", "10x10:0", "big"])
def test_bad_size_mixes_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="bad image size"):
        parse_size_mix(spec)


def test_output_lengths_are_fixed_or_a_range() -> None:
    assert parse_output_len("32") == (32, 32)
    assert parse_output_len("16-64") == (16, 64)
    with pytest.raises(ValueError, match="output length"):
        parse_output_len("64-16")


def test_a_body_is_a_streaming_chat_request_with_the_image_at_the_requested_size() -> None:
    cfg = WorkloadConfig(sizes="96x64", output_len="5")
    (req,) = prepare_requests(cfg, 1, model="tiny")
    body = json.loads(req.body)
    assert body["model"] == "tiny"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == body["max_completion_tokens"] == req.max_tokens == 5
    assert body["ignore_eos"] is True
    assert body["messages"][0]["content"][-1] == {"type": "text", "text": cfg.prompts[0]}
    (img,) = images_of(req.body)
    assert img.size == (96, 64)
    assert req.image_pixels == 96 * 64
    assert req.image_bytes == len(base64.b64decode(
        body["messages"][0]["content"][0]["image_url"]["url"].split(",", 1)[1]))


def test_every_request_gets_a_different_image_unless_repeats_are_asked_for() -> None:
    unique = prepare_requests(WorkloadConfig(sizes="64x64"), 12, model="m")
    pixels = [np.asarray(images_of(r.body)[0]).tobytes() for r in unique]
    assert len(set(pixels)) == 12
    repeated = prepare_requests(WorkloadConfig(sizes="64x64", unique_images=False), 12, model="m")
    assert len({r.body for r in repeated}) < 12


def test_photos_compress_less_than_a_flat_image_and_noise_more_than_photos() -> None:
    photo = prepare_requests(WorkloadConfig(sizes="400x300"), 5, model="m")
    noise = prepare_requests(WorkloadConfig(sizes="400x300", content=ImageContent.NOISE), 5, model="m")
    flat = 400 * 300 * 3 // 100  # a flat 400×300 JPEG is a few kB; photos are tens of kB
    assert all(flat < p.image_bytes < n.image_bytes for p, n in zip(photo, noise, strict=True))


def test_size_mixes_follow_their_weights_and_output_lengths_their_range() -> None:
    cfg = WorkloadConfig(sizes="32x32:3,48x32:1", output_len="2-4", seed=3)
    reqs = prepare_requests(cfg, 200, model="m")
    share_small = np.mean([r.image_pixels == 32 * 32 for r in reqs])
    assert share_small == pytest.approx(0.75, abs=0.08)
    assert {r.max_tokens for r in reqs} == {2, 3, 4}


def test_folder_images_are_sent_as_they_are(tmp_path: Path) -> None:
    Image.new("RGB", (50, 40), "red").save(tmp_path / "a.png")
    (tmp_path / "notes.txt").write_text("not an image")
    cfg = WorkloadConfig(folder=tmp_path, unique_images=False, output_len="3")
    reqs = prepare_requests(cfg, 2, model="m")
    url = json.loads(reqs[0].body)["messages"][0]["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode((tmp_path / "a.png").read_bytes()).decode()
    assert reqs[0].image_pixels == 2000


def test_an_empty_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no images in"):
        prepare_requests(WorkloadConfig(folder=tmp_path), 1, model="m")


def test_text_only_requests_carry_no_image() -> None:
    (req,) = prepare_requests(WorkloadConfig(images_per_request=0), 1, model="m")
    assert images_of(req.body) == [] and req.image_bytes == 0
