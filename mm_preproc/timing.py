"""Per-stage timings, cheap enough to leave on (one ``perf_counter_ns`` call per stage).

The stages follow the image: ``decode`` (bytes → pixels, possibly at 1/2, 1/4 or 1/8 scale in
the JPEG DCT domain), ``color`` (EXIF orientation and mode → RGB), ``resize`` (to the
``smart_resize`` target), ``patchify`` (reordering the uint8 pixels into Qwen2-VL's patch order)
and ``normalize`` (rescale 1/255 and CLIP mean/std, written as float32 into the output with the
temporal repeat — one pass over the output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class StageTimings:
    """Seconds spent per stage and the data volumes each stage saw."""

    decode_s: float = 0.0
    color_s: float = 0.0
    resize_s: float = 0.0
    patchify_s: float = 0.0
    normalize_s: float = 0.0
    bytes_in: int = 0
    pixels_in: int = 0  # source pixels as announced by the header (oriented, full scale)
    pixels_decoded: int = 0  # pixels actually decoded (smaller with DCT-domain downscaling)
    pixels_out: int = 0  # target pixels after resize

    @property
    def total_s(self) -> float:
        return self.decode_s + self.color_s + self.resize_s + self.patchify_s + self.normalize_s

    def as_dict(self) -> dict[str, float | int]:
        return {
            "decode_s": self.decode_s,
            "color_s": self.color_s,
            "resize_s": self.resize_s,
            "patchify_s": self.patchify_s,
            "normalize_s": self.normalize_s,
            "total_s": self.total_s,
            "bytes_in": self.bytes_in,
            "pixels_in": self.pixels_in,
            "pixels_decoded": self.pixels_decoded,
            "pixels_out": self.pixels_out,
        }


@dataclass(slots=True)
class Stopwatch:
    """Lap timer: ``lap()`` returns seconds since the previous lap (or construction)."""

    _last_ns: int = field(default_factory=time.perf_counter_ns)

    def lap(self) -> float:
        now = time.perf_counter_ns()
        elapsed = (now - self._last_ns) / 1e9
        self._last_ns = now
        return elapsed
