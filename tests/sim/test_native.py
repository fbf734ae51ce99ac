"""The compiled event path (sim/native.py): used only when built from the sources on disk, and
then it simulates exactly what the pure-Python modules simulate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sim import native

ROOT = Path(__file__).resolve().parents[2]

# Prints which path ran and writes the trace of a short run of the default scenario.
_RUN = """
import sys
import sim.native, sim.core.device
from sim.scenario.config import load_scenario
from sim.core.simulation import Simulation
sc = load_scenario({scenario!r}, [("requests", 6000), ("duration_s", None), *{sets!r}])
Simulation(sc, policy={policy!r}, trace_path=sys.argv[1]).run()
print("compiled" if sim.core.device.__file__.endswith(sim.native.EXT) else "pure", sim.native.ACTIVE)
"""


def _copy_sources(dst: Path) -> None:
    """A checkout holding what the simulator needs: sim/, the record schema, the profiles."""
    shutil.copytree(ROOT / "sim", dst / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    (dst / "edgeserve").mkdir()
    (dst / "edgeserve" / "__init__.py").write_text("")
    shutil.copy(ROOT / "edgeserve" / "records.py", dst / "edgeserve" / "records.py")
    shutil.copytree(ROOT / "models" / "profiles", dst / "models" / "profiles")


def _fake_build(root: Path) -> Path:
    """A 'build' of ``root``'s present sources whose compiled device module is garbage: any
    attempt to use it fails loudly at import."""
    d = native.build_dir(root)
    (d / "sim" / "core").mkdir(parents=True)
    (d / "sim" / "core" / f"device{native.EXT}").write_bytes(b"not a shared object")
    (d / "manifest.json").write_text(json.dumps({"fingerprint": native.fingerprint(root)}))
    return d


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (native.ENV_PURE, "PYTHONPATH")}
    env.update(extra)
    return env


def _import_device(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sim.core.device, sim.native; print(sim.native.ACTIVE, sim.core.device.__file__)",
        ],
        cwd=root,
        env=_env(**env),
        capture_output=True,
        text=True,
    )


def test_guard_states_and_activation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(native.ENV_PURE, raising=False)
    _copy_sources(tmp_path)
    path = [str(tmp_path / "sim")]
    assert native.status(tmp_path)[0] == "absent"
    assert not native.activate(path, tmp_path) and path == [str(tmp_path / "sim")]
    d = _fake_build(tmp_path)
    assert native.status(tmp_path) == ("fresh", d)
    assert native.activate(path, tmp_path) and path[0] == str(d / "sim")
    path.pop(0)
    monkeypatch.setenv(native.ENV_PURE, "1")
    assert not native.activate(path, tmp_path)
    monkeypatch.delenv(native.ENV_PURE)
    assert capsys.readouterr().err == ""
    # any edit under sim/ (here a comment in a module that is not even compiled) makes it stale
    with (tmp_path / "sim" / "experiments" / "plots.py").open("a") as f:
        f.write("# edited\n")
    assert native.status(tmp_path)[0] == "stale"
    assert not native.activate(path, tmp_path) and len(path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stale" in err and "pure Python" in err
    # so does an edit of the record schema the compiled code builds records of
    (tmp_path / "sim" / "experiments" / "plots.py").write_text((ROOT / "sim" / "experiments" / "plots.py").read_text())
    assert native.status(tmp_path)[0] == "fresh"
    with (tmp_path / "edgeserve" / "records.py").open("a") as f:
        f.write("# edited\n")
    assert native.status(tmp_path)[0] == "stale"


def test_import_uses_a_fresh_build_and_never_a_stale_one(tmp_path: Path) -> None:
    """Real imports in fresh interpreters: a fresh build is what ``import sim.core.device`` loads (the
    garbage module fails the import), an edit turns it into a warning and the pure source."""
    _copy_sources(tmp_path)
    _fake_build(tmp_path)
    fresh = _import_device(tmp_path)
    assert fresh.returncode != 0 and "device" in fresh.stderr  # the build was really used
    forced = _import_device(tmp_path, **{native.ENV_PURE: "1"})
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split() == ["False", str(tmp_path / "sim" / "core" / "device.py")]
    with (tmp_path / "sim" / "core" / "device.py").open("a") as f:
        f.write("\n# edited after the build\n")
    stale = _import_device(tmp_path)
    assert stale.returncode == 0, stale.stderr
    assert stale.stdout.split() == ["False", str(tmp_path / "sim" / "core" / "device.py")]
    assert stale.stderr.count("\n") == 1 and "stale" in stale.stderr


@pytest.fixture(scope="module")
def compiled_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository if its build is fresh (``make`` made one), else a copy compiled here once
    (about half a minute)."""
    if native.status(ROOT)[0] == "fresh":
        return ROOT
    root = tmp_path_factory.mktemp("checkout")
    _copy_sources(root)
    native.build(root)
    assert native.status(root)[0] == "fresh"
    return root


# vLLM V1 step engines (sim/core/step_engine.py) on the Jetsons and the cloud GPU, with step noise
_STEP = {"base_s": 0.018, "cv": 0.1, "max_num_seqs": 8,
         "per": {"prefill_tokens": 6e-4, "decode_tokens": 0.002, "context_tokens": 2e-7}}
_STEPS = [("devices[0].profile.llm.step", _STEP),
          ("cloud[0].profile.server.step", dict(_STEP, max_num_seqs=64, base_s=0.01))]
# the Jetsons as CPU servers: shared cores and admission limits that reject a fifth of them
_SERVER = [("devices[0].profile.llm.step", _STEP),
           ("devices[0].profile.host", {"cores": 2, "engine_threads": 2}),
           ("devices[0].profile.admission",
            {"max_pending": 1, "max_inflight": 4, "max_engine_queue": 1})]


@pytest.mark.parametrize(
    ("scenario", "policy", "sets"),
    [
        (None, None, []),  # the default scenario, predicted latency (the benchmark's run)
        (None, "always_local", []),
        ("camera-deadlines", "frame_drop", []),
        ("camera-deadlines", "model_downgrade", []),
        (None, None, _STEPS),
        (None, "always_local", _SERVER),
    ],
)
def test_compiled_and_pure_write_identical_traces(
    tmp_path: Path, compiled_root: Path, scenario: str | None, policy: str | None,
    sets: list[tuple[str, object]]
) -> None:
    root = compiled_root
    code = _RUN.format(scenario=scenario, policy=policy, sets=sets)
    out = {}
    for mode, env in (("compiled", {}), ("pure", {native.ENV_PURE: "1"})):
        trace = tmp_path / f"{mode}.jsonl"
        r = subprocess.run(
            [sys.executable, "-c", code, str(trace)],
            cwd=root,
            env=_env(**env),
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [mode, str(mode == "compiled")]
        out[mode] = trace.read_bytes()
    assert out["compiled"].count(b"\n") > 6000
    assert out["compiled"] == out["pure"]
