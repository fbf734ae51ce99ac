"""scripts/detect_gpu.sh: which vLLM build `make` installs on this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "detect_gpu.sh"


def detect(tmp_path: Path, nvidia_smi: str | None, gpu: str | None = None) -> tuple[int, str]:
    """Run the script with only ``tmp_path/bin`` (and the shell's basics) on PATH; an
    ``nvidia-smi`` there behaves as given (a shell body), or there is none."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if nvidia_smi is not None:
        tool = bin_dir / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if gpu is not None:
        env["GPU"] = gpu
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=30)
    return done.returncode, done.stdout.strip()


def test_a_listed_gpu_means_the_gpu_build(tmp_path: Path) -> None:
    listed = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"'
    assert detect(tmp_path, listed) == (0, "gpu")
    assert detect(tmp_path, listed, gpu="0") == (0, "cpu")


def test_no_tool_or_a_failing_one_means_the_cpu_build(tmp_path: Path) -> None:
    assert detect(tmp_path, None) == (0, "cpu")
    failing = 'echo "NVIDIA-SMI has failed because it could not communicate" >&2; exit 9'
    assert detect(tmp_path / "f", failing) == (0, "cpu")


def test_gpu_1_forces_the_gpu_build_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    assert detect(tmp_path, None, gpu="1") == (0, "gpu")
    rc, out = detect(tmp_path / "b", None, gpu="maybe")
    assert rc == 2 and out == ""


def test_this_machine_gets_the_build_its_nvidia_smi_says() -> None:
    has_gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                         env={**os.environ, "GPU": ""}, timeout=30).stdout.strip()
    assert out == ("gpu" if has_gpu else "cpu")
