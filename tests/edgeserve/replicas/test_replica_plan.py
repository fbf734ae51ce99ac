"""Where replicas run: GPUs split without sharing, cores split in slices, a layout that does not
fit refused in one paragraph that says what to change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeserve.config import ConfigError
from edgeserve.hardware import Platform
from edgeserve.net import free_port
from edgeserve.replicas.plan import ReplicaSlot, plan_replicas


def test_on_gpus_replica_i_gets_gpu_i_and_its_share_of_the_cores() -> None:
    slots = plan_replicas(2, 1, Platform.GPU, cores=range(16), gpus=["0", "1"])
    assert [s.env() for s in slots] == [{"CUDA_VISIBLE_DEVICES": "0"},
                                        {"CUDA_VISIBLE_DEVICES": "1"}]
    assert [s.cores for s in slots] == [tuple(range(8)), tuple(range(8, 16))]
    assert slots[1].describe() == "GPU 1, cores 8-15"


def test_tensor_parallel_replicas_take_consecutive_gpus_of_the_visible_ones() -> None:
    slots = plan_replicas(2, 2, Platform.GPU, cores=range(8), gpus=["4", "5", "6", "7"])
    assert [s.gpus for s in slots] == [("4", "5"), ("6", "7")]


def test_one_replica_of_tp2_takes_both_gpus() -> None:
    (slot,) = plan_replicas(1, 2, Platform.GPU, cores=range(16), gpus=["0", "1"])
    assert slot.env() == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_two_replicas_on_one_gpu_are_refused_with_what_to_change() -> None:
    with pytest.raises(ConfigError) as e:
        plan_replicas(2, 1, Platform.GPU, cores=range(16), gpus=["0"])
    msg = str(e.value)
    assert "need 2 GPUs" in msg and "shows 1" in msg and "replicas x size <= 1" in msg
    assert "\n" not in msg


def test_on_the_cpu_build_each_replica_gets_cores_of_its_own() -> None:
    slots = plan_replicas(2, 1, Platform.CPU, cores=[0, 1, 2, 3, 4], gpus=[])
    assert slots == [ReplicaSlot(0, cores=(0, 1)), ReplicaSlot(1, cores=(2, 3))]
    assert slots[0].env() == {} and slots[0].describe() == "cores 0-1"


def test_more_replicas_than_cores_are_refused() -> None:
    with pytest.raises(ConfigError) as e:
        plan_replicas(3, 1, Platform.CPU, cores=[0, 1], gpus=[])
    assert "at least 3 cores" in str(e.value) and "may use 2 (0-1)" in str(e.value)


def test_tensor_parallel_ranks_count_as_cores_too() -> None:
    with pytest.raises(ConfigError, match="tensor-parallel size 4 on vLLM's CPU build need at "
                                          "least 4 cores"):
        plan_replicas(1, 4, Platform.CPU, cores=[0, 1], gpus=[])


def test_serve_refuses_more_replicas_than_cores_before_starting_anything(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-m", "edgeserve", "serve", "--replicas", str(cores + 1),
         "--port", str(free_port()), "--engine-log", str(tmp_path / "engine.log")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"need at least {cores + 1} cores" in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "engine-replicas").exists()  # nothing was started
