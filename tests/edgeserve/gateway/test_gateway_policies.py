"""The gateway decides with the simulator's own policy code, and its config fails clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import edgeserve.gateway.state as gateway_state
import sim.core.policies as sim_policies
from edgeserve.gateway.config import GatewayConfig, load_gateway_config
from sim.scenario.schema import ConfigError


def code(fn: object) -> object:
    """A function's code object (a mypyc-compiled method has none: then the function itself)."""
    return getattr(fn, "__code__", fn)


@pytest.mark.parametrize("name", sorted(sim_policies.POLICIES))
def test_gateway_policy_decide_is_the_simulators_code(name: str, tmp_path: Path) -> None:
    cfg = load_gateway_config(None, {"policy": name, "trace": str(tmp_path / "t.jsonl")},
                              [{"name": "dev", "url": "http://127.0.0.1:9", "place": "local"}])
    state = gateway_state.build_state(cfg)
    gateway_decide = type(state.policy).decide
    assert code(gateway_decide) is code(sim_policies.POLICIES[name].decide)
    assert gateway_state.make_policy is sim_policies.make_policy


def test_config_errors_are_one_clear_message() -> None:
    with pytest.raises(ConfigError, match="give at least one target"):
        GatewayConfig(targets=[])
    with pytest.raises(ConfigError, match="url must start with http"):
        load_gateway_config(None, {}, [{"name": "a", "url": "ftp://x", "place": "local"}])
    out = subprocess.run([sys.executable, "-m", "edgeserve", "gateway", "--local", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "url must start with http:// or https://" in out.stderr
