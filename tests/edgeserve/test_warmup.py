"""The warm-up's plan without an engine: the largest image is a 4:3 photograph resized to the
server's ``max_pixels`` with the family's factor; the report says what ran and for how long.
(That it runs before /health answers is test_serve_startup.py's, on a real server.)"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from edgeserve.config import ServeConfig
from edgeserve.warmup import WarmupReport, jpeg, largest_size


def test_the_largest_image_is_a_photograph_at_max_pixels(tiny_model_dir: Path) -> None:
    assert largest_size(ServeConfig(model=str(tiny_model_dir))) == (1148, 840)  # 1230 tokens
    small = ServeConfig(model=str(tiny_model_dir), max_pixels=200_704)  # 256 tokens
    w, h = largest_size(small)
    assert w * h <= 200_704 and w % 28 == 0 and h % 28 == 0 and w > h


def test_warm_up_images_are_distinct_jpegs_of_their_size() -> None:
    a, b = jpeg(64, 48, seed=1), jpeg(64, 48, seed=2)
    assert a != b and Image.open(io.BytesIO(a)).size == (64, 48)


def test_the_report_line_and_trace_entry() -> None:
    r = WarmupReport(requests=8, largest=(1148, 840), largest_tokens=1230, largest_copies=2,
                     common_sizes=5, start_t_s=10.0, end_t_s=12.5)
    assert r.line() == ("warm-up: 8 requests (the largest image, 1148x840 = 1230 tokens, 2 at "
                        "once; 5 common sizes; text only) in 2.5 s before ready")
    assert r.as_meta()["end_t_s"] == 12.5 and r.as_meta()["duration_s"] == 2.5
