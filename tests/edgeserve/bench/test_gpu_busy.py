"""GPU busy fraction from nvidia-smi samples."""

from __future__ import annotations

from datetime import datetime

from edgeserve.bench.gpu_busy import mean_in, parse_samples


def test_samples_inside_the_window_are_averaged_as_fractions() -> None:
    text = ("2026/12/04 10:00:00.000, 40\n2026/12/04 10:00:00.200, 60\n"
            "garbage\n2026/12/04 10:00:00.400, 100\n[N/A], [N/A]\n")
    samples = parse_samples(text)
    assert [u for _, u in samples] == [0.4, 0.6, 1.0]
    t0 = datetime(2026, 12, 4, 10, 0, 0).timestamp()
    assert mean_in(samples, t0, t0 + 0.3) == 0.5
    assert mean_in(samples, t0 + 1, t0 + 2) is None
