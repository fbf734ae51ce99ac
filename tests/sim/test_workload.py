"""Workloads: arrival processes, deadlines, replay of recorded traces."""

from __future__ import annotations

import itertools
import random
import statistics
from pathlib import Path

import pytest

from edgeserve.records import RequestRecord, TraceHeader, TraceWriter
from sim.core.workload import arrivals, smart_resize
from sim.scenario.config import ImageConfig, ImageSize, WorkloadConfig, WorkloadKind


def gaps(cfg: WorkloadConfig, n: int) -> list[float]:
    ts = [a[0] for a in itertools.islice(arrivals(cfg, random.Random(1)), n)]
    return [b - a for a, b in itertools.pairwise([0.0, *ts])]


def test_poisson_gaps_are_exponential_with_the_rate() -> None:
    g = gaps(WorkloadConfig(kind=WorkloadKind.POISSON, rate_hz=4.0), 100_000)
    assert statistics.fmean(g) == pytest.approx(0.25, rel=0.01)
    assert statistics.stdev(g) / statistics.fmean(g) == pytest.approx(1.0, rel=0.02)


def test_gamma_gaps_have_the_rate_and_the_burstiness() -> None:
    g = gaps(WorkloadConfig(kind=WorkloadKind.GAMMA, rate_hz=2.0, cv=3.0), 200_000)
    assert statistics.fmean(g) == pytest.approx(0.5, rel=0.03)
    assert statistics.stdev(g) / statistics.fmean(g) == pytest.approx(3.0, rel=0.05)


def test_camera_streams_are_periodic_with_per_frame_deadlines() -> None:
    cfg = WorkloadConfig(kind=WorkloadKind.PERIODIC, fps=10.0, streams=3)
    frames = list(itertools.islice(arrivals(cfg, random.Random(5)), 30))
    phases = [f[0] for f in frames[:3]]
    assert all(0 <= p < 0.1 for p in phases)
    for k, f in enumerate(frames):
        assert f[0] == pytest.approx(phases[k % 3] + 0.1 * (k // 3))
        assert f[6] == pytest.approx(f[0] + 0.1)  # deadline: one frame period


def test_image_sizes_follow_their_weights_and_output_tokens_their_range() -> None:
    cfg = WorkloadConfig(image=ImageConfig(sizes=[ImageSize(640, 480, 3), ImageSize(100, 100, 1)]),
                         output_tokens=[4, 8])
    a = list(itertools.islice(arrivals(cfg, random.Random(2)), 40_000))
    share = sum(1 for x in a if x[1] == 640) / len(a)
    assert share == pytest.approx(0.75, abs=0.01)
    assert {x[5] for x in a} == {4, 5, 6, 7, 8}
    assert a[0][3] == int(a[0][1] * a[0][2] * 0.25)  # JPEG bytes from bytes per pixel


def test_smart_resize_matches_qwen2_vl() -> None:
    assert smart_resize(480, 640) == (476, 644)  # rounded to multiples of 28
    h, w = smart_resize(3000, 4000)  # capped at max_pixels, aspect kept
    assert h * w <= 28 * 28 * 1280 and h % 28 == 0 and w % 28 == 0
    assert smart_resize(20, 20) == (56, 56)  # raised to min_pixels


def test_replay_keeps_recorded_arrivals_and_sizes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with TraceWriter(path, TraceHeader(producer="edgeserve serve")) as w:
        for i, t in enumerate([105.0, 100.0, 101.5]):  # written at finish, not in arrival order
            w.write(RequestRecord(id=str(i), arrived_s=t, source_width=800 + i, source_height=600,
                                  image_bytes=1000 + i, prompt_tokens=700, image_tokens=600,
                                  output_tokens=20 + i))
    cfg = WorkloadConfig(kind=WorkloadKind.REPLAY, trace=str(path), time_scale=2.0)
    got = list(arrivals(cfg, random.Random(0)))
    assert [(a[0], a[1], a[3], a[4], a[5]) for a in got] == [
        (0.0, 801, 1001, 100, 21), (3.0, 802, 1002, 100, 22), (10.0, 800, 1000, 100, 20)]


@pytest.mark.parametrize(("width", "height"), [
    (640, 480), (1280, 720), (2400, 1800), (3600, 2700), (4000, 3000), (6000, 800), (9000, 9000)])
def test_decoded_pixels_are_what_mm_preproc_decodes(width: int, height: int) -> None:
    # the simulator's copy of the runtime's JPEG downscale rule, checked against the real decoder
    import io

    import numpy as np
    from PIL import Image

    import mm_preproc
    from sim.core.workload import decoded_pixels

    buf = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, "JPEG", quality=80)
    r = mm_preproc.preprocess(buf.getvalue(), max_source_pixels=100_000_000)
    assert decoded_pixels(width, height, r.target_width, r.target_height) == \
        r.timings.pixels_decoded
