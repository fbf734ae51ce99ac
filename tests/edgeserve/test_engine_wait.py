"""How vLLM's engine processes wait (edgeserve.engine_wait): the plugin vLLM loads in each of its
processes replaces the shared-memory queues' sched_yield spin with short sleeps where the server
asked for it, and nowhere else.

Each case runs vLLM's own plugin loader (``vllm.plugins.load_general_plugins``, as its EngineCore
and model worker call it) in a fresh interpreter, so the patch of one case cannot leak into
another or into this process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.metadata import entry_points

import pytest

from edgeserve import engine_wait
from edgeserve.config import ConfigError, ServeConfig

PROBE = """
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.distributed import utils
from vllm.distributed.device_communicators import shm_broadcast
from edgeserve.engine_wait import nap
print(shm_broadcast.sched_yield is nap, utils.sched_yield is nap)
"""


def loaded_patch(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (engine_wait.ENV, "VLLM_PLUGINS")}
    if env_value is not None:
        env[engine_wait.ENV] = env_value
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_plugin_is_registered_with_vllm() -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert plugins.get("edgeserve_engine_wait") == "edgeserve.engine_wait:register"
    assert engine_wait.plugin_installed()


def test_vllms_loader_patches_the_spin_when_the_server_asks() -> None:
    assert loaded_patch("sleep") == "True True"


@pytest.mark.parametrize("value", [None, "yield"])
def test_vllm_is_left_alone_otherwise(value: str | None) -> None:
    """`vllm serve` in the same environment, or `--engine-wait yield`: vLLM's own spin."""
    assert loaded_patch(value) == "False False"


def test_a_nap_sleeps_rather_than_spins() -> None:
    """A nap leaves the run queue: it takes at least NAP_S of wall time and little CPU."""
    n = 200
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        engine_wait.nap()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= n * engine_wait.NAP_S
    assert cpu < wall


def test_the_config_takes_the_two_names_and_refuses_others() -> None:
    assert ServeConfig(engine_wait="sleep").engine_wait is engine_wait.EngineWait.SLEEP  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="engine_wait must be 'yield' or 'sleep'"):
        ServeConfig(engine_wait="spin")  # type: ignore[arg-type]
