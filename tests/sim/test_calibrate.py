"""Calibration recovers the service-time parameters of a known device from its trace.

The trace comes from the simulator itself, run on a profile whose coefficients we chose; the
calibrator sees only the trace file, as it would a runtime trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edgeserve.cli.main import main
from sim.core.simulation import Simulation
from sim.fit.stage_fits import fit_stages
from sim.fit.traces import read_records
from sim.scenario.config import scenario_from_raw
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import build

TRUTH: dict[str, dict[str, Any]] = {
    # the 4000×3000 photos decode at 1/2 scale (3 MP): that separates source and decoded pixels
    "image_decode": {"base_s": 0.002, "per": {"source_pixels": 5e-9, "decoded_pixels": 2e-8}},
    "resize": {"base_s": 0.0005, "per": {"decoded_pixels": 2e-9, "target_pixels": 5e-9}},
    "normalize": {"base_s": 0.0003, "per": {"target_pixels": 1e-8}},
    "encode": {"base_s": 0.01, "per": {"image_tokens": 1e-4}},
    "prefill": {"base_s": 0.02, "per": {"prompt_tokens": 5e-4}},
    "decode_step": {"base_s": 0.015, "per": {"batch": 0.003}},
}


def truth_trace(path: Path, kind: str, cv: float = 0.0, requests: int = 3000) -> Path:
    stages = {}
    for s, m in TRUTH.items():
        unit = "cpu" if s in ("image_decode", "resize", "normalize") else "gpu"
        model = {"kind": kind if unit == "cpu" or s == "encode" else "deterministic", **m}
        if model["kind"] == "lognormal":
            model["cv"] = cv
        stages[s] = {"unit": unit, "model": model}
    sizes = [{"width": w, "height": h} for w, h in
             [(640, 480), (1280, 720), (1920, 1080), (4000, 3000), (800, 800), (320, 240)]]
    scenario = scenario_from_raw({
        "name": "truth", "seed": 7, "requests": requests,
        "devices": [{"name": "dev", "profile": {
            "name": "truth",
            "units": {"cpu": {"kind": "cpu", "count": 4}, "gpu": {"kind": "gpu"}},
            "stages": stages,
            "thermal": {"r_c_per_w": 1.0, "c_j_per_c": 100.0},
            "llm": {"kv_capacity_tokens": 100000, "max_batch": 8},
        }, "workload": {"kind": "poisson", "rate_hz": 0.4, "image": {"sizes": sizes},
                        "output_tokens": [8, 64]}}],
    })
    Simulation(scenario, trace_path=path).run()
    return path


def assert_recovers(fits: dict, rel: float) -> None:
    for stage, m in TRUTH.items():
        fit = fits[stage]
        assert fit.base_s == pytest.approx(m["base_s"], rel=rel, abs=2e-5), stage
        for feature, coef in m["per"].items():
            assert fit.per.get(feature, 0.0) == pytest.approx(coef, rel=rel), (stage, feature)


def test_deterministic_stages_are_recovered_to_0_1_percent(tmp_path: Path) -> None:
    cal = fit_stages(read_records([truth_trace(tmp_path / "t.jsonl", "deterministic")]))
    assert 2 <= cal.workers <= 4  # the workers seen busy in the trace, of the profile's four
    assert_recovers(cal.fits, rel=1e-3)
    assert cal.fits["image_decode"].cv < 1e-6


def test_noisy_stages_are_recovered_within_a_few_percent(tmp_path: Path) -> None:
    cal = fit_stages(read_records([truth_trace(tmp_path / "t.jsonl", "lognormal", cv=0.1)]))
    assert_recovers(cal.fits, rel=0.05)
    assert cal.fits["resize"].cv == pytest.approx(0.1, abs=0.02)


def test_cli_writes_a_profile_that_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = truth_trace(tmp_path / "t.jsonl", "deterministic", requests=600)
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(trace), "--out", str(out), "--base", "jetson-orin-nano"]) == 0
    prof = build(DeviceProfile, yaml.safe_load(out.read_text()), "fitted")
    assert prof.name == "fitted"
    assert prof.stages["image_decode"].model.per["source_pixels"] == pytest.approx(5e-9, rel=1e-3)
    assert prof.stages["image_decode"].model.per["decoded_pixels"] == pytest.approx(2e-8, rel=1e-3)
    # the trace's two workers, not the base profile's 6 cores: the profile is the measured machine
    assert prof.units["cpu"].count == 2
    assert "image_decode" in capsys.readouterr().out


def test_cli_rejects_a_missing_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "p.yaml")]) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_a_trace_without_an_encoder_gives_a_profile_without_one(tmp_path: Path) -> None:
    from sim.fit.profile_writer import to_profile
    from sim.scenario.config import PROFILE_DIR
    from sim.scenario.schema import load_yaml

    trace = tmp_path / "t.jsonl"
    truth_trace(trace, "deterministic", requests=300)
    recs = list(read_records([trace]))
    for r in recs:
        r.encode_end_s = None
    cal = fit_stages(recs)
    prof = to_profile(cal, load_yaml(PROFILE_DIR / "jetson-orin-nano.yaml"), "x", [str(trace)])
    assert "encode" not in prof["stages"] and "encode" not in cal.fits
    build(DeviceProfile, prof, "x")


def test_an_image_stages_cv_is_its_spread_among_images_of_one_size_not_the_models_misfit() -> None:
    import numpy as np

    from sim.fit.least_squares import fit_linear, within_group_cv

    # the times grow with tokens² but not as one line: the smallest size runs 3 × and the middle
    # one half of what tokens² alone says (a misfit no base and slope take up); within each size
    # the times spread by 10 %
    rng = np.random.default_rng(3)
    tokens = np.repeat([80.0, 700.0, 1271.0], 30)
    misfit = np.select([tokens < 100, tokens < 1000], [3.0, 0.5], 1.0)
    y = 2.6e-7 * tokens ** 2 * misfit * rng.lognormal(0.0, 0.1, len(tokens))
    x = np.column_stack([tokens ** 2])
    plain = fit_linear("encode", x, y, ["image_tokens_sq"])
    within = fit_linear("encode", x, y, ["image_tokens_sq"], cv_within_groups=True)
    assert plain.cv > 0.5  # the misfit counted as noise
    assert within.cv == pytest.approx(0.1, abs=0.03)
    assert within.per == plain.per  # the coefficients are the same fit
    # one size, or sizes too rare to form groups of three: nothing to pool
    assert within_group_cv(x[:30], y[:30]) is None
    assert within_group_cv(np.arange(10.0)[:, None], np.ones(10)) is None
