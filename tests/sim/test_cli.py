"""``edgeserve sim``: run, compare and sweep from the command line, and clear errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from edgeserve.cli.main import main
from edgeserve.records import DeviceSample, RequestRecord, TraceHeader, read_trace


def test_run_default_scenario_writes_trace_summary_and_plots(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "--duration", "300", "--out", str(tmp_path), "--plots",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "scenario default, policy predicted_latency" in out and "fleet" in out
    items = list(read_trace(tmp_path / "trace.jsonl"))
    assert isinstance(items[0], TraceHeader) and items[0].producer == "edgeserve sim"
    recs = [i for i in items if isinstance(i, RequestRecord)]
    samples = [i for i in items if isinstance(i, DeviceSample)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["fleet"]["requests"] == len(recs) > 100
    assert {s.device for s in samples} == {"jetson-0", "jetson-1", "kiosk", "phone"}
    for name in ("latency_cdf.png", "offload_share.png", "thermal_predicted_latency.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_compare_reports_each_policy_with_confidence_intervals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "compare", "--policies", "always_local,always_cloud", "--seeds", "3",
                 "--duration", "200", "--workers", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "mean ± 95% CI over 3 seed(s)" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("always_")}
    assert set(lines) == {"always_local", "always_cloud"} and "±" in lines["always_cloud"]
    runs = json.loads((tmp_path / "compare.json").read_text())
    assert len(runs) == 6
    cloud = [r["summary"]["fleet"]["offload_share"] for r in runs
             if r["label"]["policy"] == "always_cloud"]
    assert cloud == [1.0, 1.0, 1.0]


def test_sweep_runs_the_grid_on_a_process_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "sweep", "--param", "devices[0].link.uplink_mbps=2,50",
                 "--param", "devices[0].workload.rate_hz=0.5,1.5", "--policies",
                 "always_cloud", "--duration", "200", "--workers", "2", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    by = {(r["devices[0].link.uplink_mbps"], r["devices[0].workload.rate_hz"]): r for r in rows}
    # a slower uplink makes offloaded requests slower
    assert float(by[("2", "1.5")]["e2e_mean_s"]) > float(by[("50", "1.5")]["e2e_mean_s"])
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["sim", "run", "--set", "devices[0].link.loss=3"],
     "scenario.devices[0].link.loss: must be within [0, 1), got 3.0"),
    (["sim", "run", "no-such-scenario.yaml"], "no-such-scenario.yaml: cannot read"),
    (["sim", "run", "--policy", "yolo"], "policy.kind: unknown policy 'yolo'"),
    (["sim", "compare", "--policies", "always_local,yolo"], "unknown policy 'yolo'"),
    (["sim", "sweep"], "give at least one --param"),
    (["sim", "sweep", "--param", "devices[9].count=1,2"], "is not an index"),
    # ray is installed for the tests, but no cluster runs
    (["sim", "compare", "--ray", "--seeds", "1"], "cannot connect to a Ray cluster at 'auto'"),
])
def test_user_errors_are_one_line_messages(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--duration", "10"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_profiles_and_policies_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "profiles"]) == 0
    assert main(["sim", "policies"]) == 0
    out = capsys.readouterr().out
    assert "jetson-orin-nano" in out and "h100-qwen2-vl-7b" in out
    # box profiles, which cloud entries may name
    assert any(ln.split()[:2] == ["l40s-x4-pcie-qwen2-vl-7b", "box"] for ln in out.splitlines())
    assert "predicted_latency" in out and "frame_drop" in out


def test_a_recorded_trace_replays_with_the_same_arrivals(tmp_path: Path) -> None:
    assert main(["sim", "run", "--duration", "120", "--trace", str(tmp_path / "rec.jsonl"),
                 "--no-progress"]) == 0
    original = sorted(r.arrived_s for r in read_trace(tmp_path / "rec.jsonl")
                      if isinstance(r, RequestRecord) and r.device == "phone")
    (tmp_path / "replay.yaml").write_text(
        "name: replay\nduration_s: 1000\npolicy: {kind: always_local}\n"
        "devices:\n  - name: phone\n    profile: phone-soc\n"
        "    workload: {kind: replay, trace: rec.jsonl, trace_device: phone}\n")
    assert main(["sim", "run", str(tmp_path / "replay.yaml"), "--trace",
                 str(tmp_path / "again.jsonl"), "--no-progress"]) == 0
    again = sorted(r.arrived_s for r in read_trace(tmp_path / "again.jsonl")
                   if isinstance(r, RequestRecord))
    assert len(again) == len(original) > 5
    assert again == pytest.approx([t - original[0] for t in original])


def test_a_missing_replay_trace_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(
        "name: r\nduration_s: 10\ndevices:\n  - name: d\n    profile: phone-soc\n"
        "    workload: {kind: replay, trace: gone.jsonl}\n")
    assert main(["sim", "run", str(tmp_path / "s.yaml")]) == 2
    assert "scenario.devices[0].workload.trace: no such file 'gone.jsonl'" in capsys.readouterr().err


def test_set_gives_the_params_of_the_policy_chosen_on_the_command_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """phone-battery's phone offloads every request by its energy estimate; with ``by_energy``
    off it decides from the battery alone and keeps most of them."""
    shares = []
    for extra in ([], ["--set", "policy.params.by_energy=false"]):
        assert main(["sim", "run", "phone-battery", "--duration", "600", "--json",
                     "--policy", "energy_aware", *extra]) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["policy"] == "energy_aware"
        shares.append(s["fleet"]["offload_share"])
    assert shares[0] == 1.0 and shares[1] < 0.5


def test_run_prints_a_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "--duration", "60", "--json", "--policy", "always_cloud"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["policy"] == "always_cloud" and s["fleet"]["offload_share"] == 1.0
    assert [d["name"] for d in s["devices"]] == ["jetson-0", "jetson-1", "kiosk", "phone"]
