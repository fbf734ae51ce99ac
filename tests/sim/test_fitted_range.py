"""A calibrated profile knows the sizes it was fitted on, and validation says what lies outside.

``data/calib.jsonl`` holds only 1280×800 photos (1260 image tokens); ``data/heldout.jsonl``
holds 640×480 and 1280×720 ones (391 and 1196 tokens): every held-out request lies below the
fitted image sizes, so the profile extrapolates there and the report must say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from edgeserve.cli.main import main
from edgeserve.records import Outcome, RequestRecord, read_trace
from sim.scenario.config import load_device_profile
from sim.scenario.fitted_range import FittedRange
from sim.scenario.schema import ConfigError, build

DATA = Path(__file__).parent / "data"


def record(id: str, *, tokens: int = 0, w: int = 0, h: int = 0, decoded: int = 0,
           prompt: int = 20, outcome: Outcome = Outcome.OK) -> RequestRecord:
    return RequestRecord(id=id, arrived_s=0.0, outcome=outcome, image_tokens=tokens,
                         num_images=1 if tokens else 0, source_width=w, source_height=h,
                         decoded_pixels=decoded, target_width=w, target_height=h,
                         prompt_tokens=prompt)


def ok_records(path: Path) -> list[RequestRecord]:
    return [r for r in read_trace(path) if isinstance(r, RequestRecord) and r.outcome is Outcome.OK]


def test_the_range_spans_the_completed_requests_only() -> None:
    recs = [record("a", tokens=391, w=640, h=480, decoded=307200, prompt=428),
            record("b", tokens=1230, w=4000, h=3000, decoded=0, prompt=1267),  # decoded unknown
            record("c", prompt=12),  # text only: no image features
            record("d", tokens=5000, w=9000, h=9000, prompt=5100, outcome=Outcome.REJECTED)]
    fr = FittedRange.of(recs)
    assert fr.image_tokens == (391, 1230)
    assert fr.source_pixels == (640 * 480, 4000 * 3000)
    assert fr.decoded_pixels == (307200, 307200)
    assert fr.prompt_tokens == (12, 1267)


def test_requests_outside_the_range_are_counted_per_feature() -> None:
    fr = FittedRange(image_tokens=(609, 1260), prompt_tokens=(600, 1300))
    inside = [record("a", tokens=609, prompt=650), record("b", tokens=1260, prompt=1297)]
    assert fr.outside(inside) == []
    held = [*inside, record("c", tokens=391, prompt=428), record("d", tokens=221, prompt=258),
            record("e", prompt=20)]  # text only: outside in prompt tokens, no image tokens
    (tokens, prompt) = fr.outside(held)
    assert (tokens.feature, tokens.values, tokens.requests, tokens.of_requests) == (
        "image_tokens", (221, 391), 2, 4)
    assert (prompt.feature, prompt.values, prompt.requests, prompt.of_requests) == (
        "prompt_tokens", (20, 428), 3, 5)
    assert "221–391 outside the fitted 609–1260 in 2 of 4 requests (50 %)" in tokens.text()


def test_a_range_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="image_tokens"):
        build(FittedRange, {"image_tokens": [1260, 609]}, "fitted_range")


def test_calibrate_writes_the_range_of_its_traces_into_the_profile(tmp_path: Path) -> None:
    out = tmp_path / "box.yaml"
    assert main(["calibrate", str(DATA / "calib.jsonl"), "--out", str(out)]) == 0
    fitted = yaml.safe_load(out.read_text())["fitted_range"]
    recs = ok_records(DATA / "calib.jsonl")
    assert fitted["image_tokens"] == [min(r.image_tokens for r in recs),
                                      max(r.image_tokens for r in recs)]
    assert fitted["prompt_tokens"] == [min(r.prompt_tokens for r in recs),
                                       max(r.prompt_tokens for r in recs)]
    assert load_device_profile(out).fitted_range == build(FittedRange, fitted, "fitted_range")


def test_validate_names_the_sizes_the_profile_extrapolates_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = tmp_path / "box.yaml"
    assert main(["calibrate", str(DATA / "calib.jsonl"), "--out", str(prof)]) == 0
    capsys.readouterr()
    out = tmp_path / "v"
    assert main(["calibrate", "validate", str(prof), str(DATA / "heldout.jsonl"),
                 "--seeds", "1", "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    held = ok_records(DATA / "heldout.jsonl")
    fitted = yaml.safe_load(prof.read_text())["fitted_range"]["image_tokens"]
    below = [r for r in held if r.image_tokens < fitted[0]]
    assert below  # the premise of the test data
    assert (f"note: image_tokens {min(r.image_tokens for r in below)}–"
            f"{max(r.image_tokens for r in below)} outside the fitted") in printed
    (report,) = json.loads((out / "validation.json").read_text())
    tokens = next(x for x in report["outside_fitted_range"] if x["feature"] == "image_tokens")
    assert tokens["requests"] == len(below) and tokens["of_requests"] == len(held)
    # the calibration trace itself lies inside its own range: no note
    assert main(["calibrate", "validate", str(prof), str(DATA / "calib.jsonl"), "--seeds", "1"]) == 0
    assert "outside the fitted" not in capsys.readouterr().out


def test_sim_run_says_when_a_calibrated_profile_is_asked_for_sizes_it_never_saw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = tmp_path / "box.yaml"
    assert main(["calibrate", str(DATA / "calib.jsonl"), "--out", str(prof)]) == 0  # 1280×800 only

    def run(sizes: str) -> str:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(
            f"name: s\ndevices:\n  - name: box\n    profile: {prof}\n"
            f"    workload: {{kind: poisson, rate_hz: 0.5, image: {{sizes: [{sizes}]}}}}\n")
        capsys.readouterr()
        assert main(["sim", "run", str(scenario), "--requests", "5", "--no-progress"]) == 0
        return capsys.readouterr().err

    assert "outside" not in run("{width: 1280, height: 800}")
    err = run("{width: 1280, height: 800}, {width: 640, height: 480}")
    assert ("note: device box: image_tokens 391 outside the 1260 its profile" in err
            and "(1 of the workload's 2 image sizes)" in err)
