"""The wheels a GPU host lacks, from its recorded `pip list` (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from edgeserve.gpu_harness.__main__ import GPU_EXTRAS, main
from edgeserve.gpu_harness.resolve import (
    EDGESERVE_LEAVE_OUT,
    VLLM_LEAVE_OUT,
    VLLM_PINS,
    Dist,
    RecordedSource,
    TargetEnv,
    edgeserve_requirements,
    read_pip_list,
    resolve,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
ROOT = Path(__file__).resolve().parents[3]
HOST = read_pip_list((DATA / "h200_pip_list.txt").read_text())
RECORDED = RecordedSource.load(DATA / "vllm-0.26.0-wheel-metadata.json")


def plan_for_h200():  # type: ignore[no-untyped-def]
    roots = ["vllm==0.26.0", *edgeserve_requirements(ROOT / "pyproject.toml"), *GPU_EXTRAS]
    return resolve(roots, HOST, RECORDED, env=TargetEnv("3.12"),
                   leave_out=(*VLLM_LEAVE_OUT, *EDGESERVE_LEAVE_OUT), pins=VLLM_PINS)


def test_pip_list_reads_both_formats() -> None:
    assert read_pip_list("Package    Version\n---------- -------\nTorch      2.11.0\n") == {
        "torch": Version("2.11.0")}
    assert read_pip_list("Pillow==12.3.0\n-e git+x#egg=y\n") == {"pillow": Version("12.3.0")}
    assert HOST["torch"] == Version("2.11.0")


def test_the_h200_host_gets_vllm_and_what_it_lacks_never_its_torch() -> None:
    plan = plan_for_h200()
    carry = {d.key: d.version for d in plan.carry.values()}
    assert carry["vllm"] == "0.26.0"
    # the host's own builds are not replaced
    kept = {k.name for k in plan.kept}
    for name in ("torch", "torchvision", "numpy", "transformers", "triton", "pillow"):
        assert name not in carry
        assert name in plan.satisfied or name in kept
    # what the host lacks, vLLM's and edgeserve's own (simpy: `edgeserve` imports it at start)
    for name in ("msgspec", "pyzmq", "blake3", "openai", "simpy", "textual", "fastapi"):
        assert name in carry, name
    assert not set(carry) & set(HOST)
    assert carry["xgrammar"] == VLLM_PINS["xgrammar"]
    assert "nvidia-ml-py" in plan.satisfied  # NVML for edgeserve's GPU samples: the host has it
    assert plan.conflicts == []


def test_pins_the_host_does_not_follow_are_reported_and_heavy_extras_left_out() -> None:
    plan = plan_for_h200()
    kept = {k.name: (k.installed, k.wanted) for k in plan.kept}
    assert kept["numba"] == ("0.68.0", "==0.65.0")
    assert kept["numpy"][0] == "2.5.2"
    assert "flashinfer-python" in plan.left_out and "flashinfer-python" not in plan.carry
    assert any(name.startswith("opentelemetry") for name in plan.left_out)
    assert "onnxscript" in plan.left_out


def test_markers_follow_the_hosts_python_not_this_one() -> None:
    table = {"a": [{"version": "1.0", "requires": [
        'b>=2; python_version >= "3.12"', 'c; python_version < "3.12"',
        'd; extra == "fast"']}],
             "b": [{"version": "2.5", "requires": []}, {"version": "1.0", "requires": []}],
             "c": [{"version": "1.0", "requires": []}], "d": [{"version": "1.0"}]}
    plan = resolve(["a"], {}, RecordedSource(table), env=TargetEnv("3.12"))
    assert {d.key: d.version for d in plan.carry.values()} == {"a": "1.0", "b": "2.5"}
    plan = resolve(["a[fast]"], {}, RecordedSource(table), env=TargetEnv("3.11"))
    assert set(plan.carry) == {"a", "c", "d"}


def test_a_chosen_version_that_a_later_requirement_rejects_is_a_conflict() -> None:
    table = {"a": [{"version": "1.0", "requires": ["c"]}],
             "b": [{"version": "1.0", "requires": []}],
             "c": [{"version": "2.0", "requires": ["b<1"]}, {"version": "1.0"}]}
    plan = resolve(["a", "b"], {}, RecordedSource(table))
    assert plan.conflicts == ["b 1.0 chosen, c 2.0 wants <1"]
    assert isinstance(plan.carry["c"], Dist)


def test_the_cli_plans_from_a_record_and_refuses_a_missing_pip_list(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--pip-list", str(DATA / "h200_pip_list.txt"),
               "--from-record", str(DATA / "vllm-0.26.0-wheel-metadata.json")])
    assert rc == 0 and '"vllm": "0.26.0"' in capsys.readouterr().out
    assert main(["plan", "--pip-list", str(tmp_path / "none.txt")]) == 2
