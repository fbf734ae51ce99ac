"""``edgeserve calibrate`` fits the vision encoder that ran in the preprocessing workers.

With ``edgeserve serve --encoder onnx`` the tower runs in the worker right after patchify and the
engine is handed image embeddings. The calibrated profile must then carry an ``encode`` model
(image tokens and tokens², the attention's square) on the CPU stages' unit — which the simulator
runs inside the worker — and an engine step model without vision-tower terms.

``data/calib_onnx.jsonl`` was recorded from ``edgeserve serve --encoder onnx`` on the tiny model
(2-core development machine, ``scripts/record_test_traces.sh onnx``: 15 s, three image sizes).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from edgeserve.cli.main import main
from edgeserve.records import Outcome, RequestRecord, TraceHeader, TraceWriter, read_trace
from sim.core.simulation import Simulation
from sim.fit.calibrate import calibrate_traces
from sim.fit.profile_writer import to_profile
from sim.fit.stage_fits import fit_worker_encode
from sim.fit.traces import read_traces
from sim.scenario.config import scenario_from_raw
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import build

DATA = Path(__file__).parent / "data"
TRACE = DATA / "calib_onnx.jsonl"


def ok_records(path: Path) -> list[RequestRecord]:
    return [r for r in read_trace(path) if isinstance(r, RequestRecord) and r.outcome is Outcome.OK]


def test_the_recorded_trace_is_one_of_the_onnx_encoder() -> None:
    header = next(read_trace(TRACE))
    assert isinstance(header, TraceHeader) and header.meta["encoder"]["kind"] == "onnx"
    recs = ok_records(TRACE)
    assert len(recs) >= 15
    assert len({r.image_tokens for r in recs}) == 3  # three sizes: the square term is identified
    assert all(r.normalize_end_s < r.encode_end_s <= r.engine_queued_s  # type: ignore[operator]
               for r in recs)


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "onnx.yaml"
    assert main(["calibrate", str(TRACE), "--out", str(out)]) == 0
    return out


def test_the_profile_has_the_worker_encoder_and_no_tower_in_the_engine_step(profile: Path) -> None:
    prof = yaml.safe_load(profile.read_text())
    enc = prof["stages"]["encode"]
    assert enc["unit"] == prof["stages"]["image_decode"]["unit"] == "cpu"  # runs in the worker
    assert set(enc["model"]["per"]) <= {"image_tokens", "image_tokens_sq"} and enc["model"]["per"]
    step = prof["llm"]["step"]["per"]
    assert step["encoder_tokens"] == 0.0 and step["encoder_tokens_sq"] == 0.0
    assert step["prefill_tokens"] > 0
    built = build(DeviceProfile, prof, "onnx")  # loads as a profile
    assert "encode" in built.stages

    # the fitted model reproduces the measured encode times per image size (mean within 10 %)
    model = enc["model"]
    recs = ok_records(TRACE)
    for tokens in sorted({r.image_tokens for r in recs}):
        measured = np.mean([r.encode_end_s - r.normalize_end_s  # type: ignore[operator]
                            for r in recs if r.image_tokens == tokens])
        fitted = model["base_s"] + sum(
            c * (tokens if k == "image_tokens" else tokens * tokens) for k, c in model["per"].items())
        assert fitted == pytest.approx(measured, rel=0.1), tokens


def test_validate_runs_the_profile_end_to_end(profile: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v"
    assert main(["calibrate", "validate", str(profile), str(TRACE), "--out-dir", str(out),
                 "--seeds", "2"]) == 0
    assert "ttft p99" in capsys.readouterr().out
    (report,) = json.loads((out / "validation.json").read_text())
    assert report["measured_requests"] == len(ok_records(TRACE))
    rows = {r["quantity"]: r for r in report["rows"]}
    assert rows["throughput req/s"]["simulated"] > 0


def synthetic_trace(path: Path, coef: tuple[float, float, float], encoder: str = "onnx") -> Path:
    """One worker, requests far apart, encode time exactly base + a·tokens + b·tokens²."""
    base, a, b = coef
    meta = {"workers": 1, "host_cores": 2, "encoder": {"kind": encoder}}
    with TraceWriter(path, TraceHeader(producer="edgeserve serve", meta=meta)) as w:
        for i in range(30):
            t, tokens = 10.0 * i, (64, 391, 1230)[i % 3]
            norm = t + 0.05
            enc = norm + base + a * tokens + b * tokens * tokens
            w.write(RequestRecord(
                id=f"r{i}", outcome=Outcome.OK, worker=0, arrived_s=t, preproc_start_s=t,
                decode_end_s=t + 0.02, resize_end_s=t + 0.04, normalize_end_s=norm,
                encode_end_s=enc, engine_queued_s=enc + 0.001, first_token_s=enc + 0.1,
                last_token_s=enc + 0.2, finished_s=enc + 0.2, image_tokens=tokens,
                num_images=1, prompt_tokens=tokens + 20, output_tokens=4, source_width=640, source_height=480,
                target_width=644, target_height=476))
    return path


def test_the_square_term_is_recovered_from_exact_encode_times(tmp_path: Path) -> None:
    coef = (0.004, 2.0e-5, 1.2e-7)
    got = fit_worker_encode(ok_records(synthetic_trace(tmp_path / "t.jsonl", coef)))
    assert got is not None
    fit, rows = got
    assert rows.names == ["image_tokens", "image_tokens_sq"] and len(rows.y) == 30
    assert fit.base_s == pytest.approx(coef[0], rel=1e-6)
    assert fit.per["image_tokens"] == pytest.approx(coef[1], rel=1e-6)
    assert fit.per["image_tokens_sq"] == pytest.approx(coef[2], rel=1e-6)


def test_the_encoders_uncertainty_is_that_of_the_model_in_the_profile(profile: Path) -> None:
    # the intervals describe the worker encoder's own terms (tokens and tokens²), each around
    # the coefficient the profile carries, not a refit of some other rows
    prof = yaml.safe_load(profile.read_text())
    model = prof["stages"]["encode"]["model"]
    terms = prof["uncertainty"]["models"]["encode"]["terms"]
    assert set(terms) - {"base_s"} == set(model["per"])
    for k, t in terms.items():
        value = model["base_s"] if k == "base_s" else model["per"][k]
        assert t["value"] == pytest.approx(value, rel=1e-3)
        lo, hi = t["interval"]
        assert lo <= value <= hi, k


def test_without_the_onnx_encoder_the_encode_stage_stays_off_the_workers(tmp_path: Path) -> None:
    # a trace whose header names no worker-side encoder keeps the older encoder-unit fit
    cal = calibrate_traces(read_traces([synthetic_trace(tmp_path / "t.jsonl", (0.004, 2e-5, 0.0),
                                                        encoder="none")]))
    assert not cal.encode_in_worker
    prof = to_profile(cal, None, "x", ["t"])
    assert prof["stages"]["encode"]["unit"] == "gpu"
    assert "image_tokens_sq" not in prof["stages"]["encode"]["model"]["per"]


def test_the_simulator_runs_a_cpu_unit_encode_inside_the_worker(tmp_path: Path) -> None:
    stages = {s: {"unit": "cpu", "model": {"base_s": 0.01}}
              for s in ("image_decode", "resize", "normalize")}
    stages["encode"] = {"unit": "cpu", "model": {"base_s": 0.0, "per": {"image_tokens_sq": 1e-7}}}
    stages["prefill"] = {"unit": "gpu", "model": {"base_s": 0.01}}
    stages["decode_step"] = {"unit": "gpu", "model": {"base_s": 0.01}}
    scenario = scenario_from_raw({
        "name": "w", "seed": 1, "requests": 200,
        "devices": [{"name": "dev", "profile": {
            "name": "w", "units": {"cpu": {"kind": "cpu", "count": 1}, "gpu": {"kind": "gpu"}},
            "stages": stages, "thermal": {"r_c_per_w": 1.0, "c_j_per_c": 100.0},
            "llm": {"kv_capacity_tokens": 100000, "max_batch": 8},
        }, "workload": {"kind": "poisson", "rate_hz": 5.0,
                        "image": {"sizes": [{"width": 1280, "height": 800}]},
                        "output_tokens": [4, 4]}}],
    })
    trace = tmp_path / "s.jsonl"
    Simulation(scenario, trace_path=trace).run()
    recs = sorted(ok_records(trace), key=lambda r: r.preproc_start_s)  # type: ignore[arg-type, return-value]
    assert len(recs) == 200
    for r in recs:
        enc = r.encode_end_s - r.normalize_end_s  # type: ignore[operator]
        assert enc == pytest.approx(1e-7 * r.image_tokens ** 2)
    # one worker: the next image starts only after this one's encode (the worker was busy)
    for a, b in itertools.pairwise(recs):
        assert b.preproc_start_s >= a.encode_end_s - 1e-12  # type: ignore[operator]
    assert any(b.preproc_start_s == pytest.approx(a.encode_end_s)  # queued behind the encode
               for a, b in itertools.pairwise(recs))
