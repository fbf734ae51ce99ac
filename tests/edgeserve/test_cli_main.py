"""The ``edgeserve`` command imports only the subcommand it runs.

Each case runs ``python -m edgeserve`` in a real interpreter, so the modules a command pulls in are exactly those it imports
(this test process has many of them loaded already).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeserve.cli.main import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
SERVE_MUST_NOT_IMPORT = ("sim", "simpy", "tui", "textual")
SUBCOMMANDS_BY_NAME = [(name, module) for name, module, _ in SUBCOMMANDS]


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _edgeserve(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``python -m edgeserve ARGV`` and the modules loaded when it exited."""
    code = (
        "import atexit, json, runpy, sys\n"
        "atexit.register(lambda: print('MODULES ' + json.dumps(sorted(sys.modules)), "
        "file=sys.stderr))\n"
        f"sys.argv = ['edgeserve', *{list(argv)!r}]\n"
        "runpy.run_module('edgeserve', run_name='__main__', alter_sys=True)\n"
    )
    p = _python("-c", code)
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("MODULES "))
    return p, set(json.loads(line.removeprefix("MODULES ")))


def _top_level(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def test_help_lists_every_subcommand_and_imports_none_of_them() -> None:
    p, loaded = _edgeserve("--help")
    assert p.returncode == 0, p.stderr[-2000:]
    for name, _module, help_ in SUBCOMMANDS:
        assert name in p.stdout and help_ in " ".join(p.stdout.split())
    assert "edgeserve.cli.main" in loaded  # the parsing above is real
    assert not {module for _, module, _ in SUBCOMMANDS} & loaded
    assert not _top_level(loaded) & {"sim", "simpy", "tui", "textual", "vllm", "torch", "numpy"}


def test_serve_help_does_not_import_the_simulator_or_the_ui() -> None:
    p, loaded = _edgeserve("serve", "--help")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "--max-pixels" in p.stdout
    assert "edgeserve.cli.serve" in loaded
    assert not _top_level(loaded) & {*SERVE_MUST_NOT_IMPORT, "vllm", "torch"}


def test_building_the_serve_config_does_not_import_the_simulator_or_the_ui(
    tiny_model_dir: Path,
) -> None:
    code = (
        "import json, sys\n"
        "from edgeserve.cli.main import parse_args\n"
        "from edgeserve.cli.serve import config_from_args\n"
        f"cfg = config_from_args(parse_args(['serve', '--model', {str(tiny_model_dir)!r}, "
        "'--workers', '2']))\n"
        "print(json.dumps({'workers': cfg.workers, 'modules': sorted(sys.modules)}))\n"
    )
    p = _python("-c", code)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["workers"] == 2
    assert not _top_level(set(out["modules"])) & set(SERVE_MUST_NOT_IMPORT)


@pytest.mark.parametrize("name", [name for name, _, _ in SUBCOMMANDS])
def test_every_subcommand_has_a_working_help(name: str) -> None:
    p, loaded = _edgeserve(name, "--help")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(f"usage: edgeserve {name}")
    assert dict(SUBCOMMANDS_BY_NAME)[name] in loaded
    others = {module for other, module, _ in SUBCOMMANDS if other != name}
    assert not others & loaded


def test_a_missing_third_party_package_is_a_message_not_a_traceback() -> None:
    code = ("import sys; sys.modules['simpy'] = None\n"  # as if SimPy were not installed
            "from edgeserve.cli.main import main\n"
            "sys.exit(main(['sim', 'run', '--requests', '3', '--no-progress']))")
    p = _python("-c", code)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert "edgeserve sim: it needs the Python package 'simpy'" in p.stderr
