"""The compiled (mypyc) event path of the simulator: building it and deciding whether to use it.

The simulator is pure Python. ``make`` (``python -m sim.native build``) additionally compiles its
event-path modules (:data:`HOT`) with mypyc into ``build/sim-native/<interpreter>/sim/``, outside
the source tree. When ``sim`` is imported, :func:`activate` puts that directory in front of the
package's ``__path__`` — so ``import sim.core.device`` loads the compiled module — only if the build is
*fresh*: its manifest records a SHA-256 over every ``sim/**/*.py`` file and
``edgeserve/records.py`` exactly as they were compiled, and that must equal the same hash of the
sources on disk now. Any edit anywhere in ``sim/`` (or the record schema) makes the build stale:
the import falls back to pure Python with a one-line warning on stderr, never to compiled code of
older sources. ``EDGESERVE_SIM_PURE=1`` forces pure Python. ``sim.native.ACTIVE`` says which path
was taken (``sim.core.device.__file__`` shows it as well).

    make sim-native                                      # compile (skipped when fresh)
    python -c 'import sim.native as n; n.main()' status  # fresh / stale / absent, and where
    python -c 'import sim.native as n; n.main()' build   # what make sim-native runs

This module is never compiled itself, and it imports nothing of the simulator.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

#: the compiled modules (the per-event path); every other module of ``sim`` stays interpreted
HOT = tuple(
    f"core.{m}"
    for m in (
        "loop",
        "job",
        "batching",
        "step_cost",
        "step_engine",
        "device",
        "admission",
        "cpu_pool",
        "encoder_unit",
        "heat",
        "unit_power",
        "battery",
        "offload",
        "cloud",
        "network",
        "service",
        "thermal",
        "thermal_network",
        "device_network",
        "governors",
        "migration",
        "stats",
        "workload",
        "simulation",
        "policies",
    )
)
ENV_PURE = "EDGESERVE_SIM_PURE"
PKG = Path(__file__).resolve().parent  # .../sim
ROOT = PKG.parent
#: ``True`` when ``sim/__init__.py``'s :func:`activate` switched the package to the compiled modules
ACTIVE = False


def build_dir(root: Path = ROOT) -> Path:
    """Where the build for this interpreter lives (one per Python version and platform)."""
    tag = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"
    return root / "build" / "sim-native" / tag


def source_files(root: Path = ROOT) -> list[Path]:
    """Every file whose content the compiled modules may depend on, in a fixed order."""
    files = sorted((root / "sim").rglob("*.py"))
    return [*files, root / "edgeserve" / "records.py"]


def _hash_sources(h: hashlib._Hash, root: Path) -> str:
    for f in source_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def fingerprint(root: Path = ROOT) -> str:
    """SHA-256 over the interpreter's version and the relative paths and bytes of the sources."""
    return _hash_sources(hashlib.sha256(f"{sys.version}|{sysconfig.get_platform()}\n".encode()), root)


def source_fingerprint(root: Path = ROOT) -> str:
    """SHA-256 over the relative paths and bytes of the sources alone (not the interpreter): equal
    on every machine that runs the same simulator code."""
    return _hash_sources(hashlib.sha256(), root)


def status(root: Path = ROOT) -> tuple[str, Path]:
    """(``"fresh"`` | ``"stale"`` | ``"absent"``, build directory)."""
    d = build_dir(root)
    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return "absent", d
    if manifest.get("fingerprint") != fingerprint(root):
        return "stale", d
    return "fresh", d


def activate(path: list[str], root: Path = ROOT) -> bool:
    """Put a fresh build in front of the package's ``path``; returns whether it did.

    Called by ``sim/__init__.py`` with the package's ``__path__``. Absent build: pure Python,
    silently. Stale build: pure Python and one line on stderr. ``EDGESERVE_SIM_PURE`` set (to
    anything but ``0`` or empty): pure Python, silently.
    """
    if os.environ.get(ENV_PURE, "") not in ("", "0"):
        return False
    state, d = status(root)
    if state == "stale":
        print(
            f"edgeserve sim: the compiled build in {d} is stale (sources changed since it was "
            f"built); running pure Python — `make sim-native` rebuilds it",
            file=sys.stderr,
        )
    if state != "fresh":
        return False
    path.insert(0, str(d / "sim"))
    global ACTIVE
    ACTIVE = True
    return True


def follow(path: list[str], package: str, root: Path = ROOT) -> None:
    """Put the build's folder of the subpackage ``package`` (``"sim.core"``) in front of its
    ``path`` when :func:`activate` switched the package to the compiled modules (called by the
    subpackage's ``__init__.py``: a subpackage's modules are looked up in its own ``__path__``)."""
    if ACTIVE:
        path.insert(0, str(build_dir(root).joinpath(*package.split("."))))


# ---- building ------------------------------------------------------------------------------
_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
hot = sys.argv[1].split(",")
exts = mypycify(["--ignore-missing-imports", "--python-version",
                 f"{sys.version_info[0]}.{sys.version_info[1]}",
                 *(f"sim/{m.replace('.', '/')}.py" for m in hot)], group_name="sim.native_group", opt_level="3")
setup(name="edgeserve-sim-native", ext_modules=exts,
      script_args=["build_ext", "--build-lib", sys.argv[2], "--build-temp", sys.argv[3]])
"""

_SMOKE = """
import sim, sim.native
from sim.scenario.config import load_scenario
from sim.core.simulation import Simulation
import sim.core.device
assert sim.native.ACTIVE and sim.core.device.__file__.endswith(sim.native.EXT), sim.core.device.__file__
Simulation(load_scenario(None, [("requests", 2000), ("duration_s", None)])).run()
"""

EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def build(root: Path = ROOT, force: bool = False, quiet: bool = True) -> Path:
    """Compile :data:`HOT` into :func:`build_dir` (unless fresh already); returns the directory.

    The sources are copied first and the fingerprint is taken of the copy, so an edit made while
    the compiler runs makes the build stale instead of mislabelled. The new build replaces the old
    one only after a smoke run imported it and simulated 2,000 requests.
    """
    state, final = status(root)
    if state == "fresh" and not force:
        print(f"[sim-native] up to date ({final})")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sim-native-", dir=final.parent) as tmp:
        work = Path(tmp)
        src = work / "src"
        for f in source_files(root):
            dst = src / f.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
        (src / "edgeserve" / "__init__.py").write_text("")
        fp = fingerprint(src)
        out = work / "out"
        out_io = subprocess.DEVNULL if quiet else None
        try:
            subprocess.run(
                [sys.executable, "-c", _SETUP, ",".join(HOT), str(out), str(work / "tmp")],
                cwd=src,
                check=True,
                stdout=out_io,
                env=dict(os.environ, **{ENV_PURE: "1"}),
            )
        except subprocess.CalledProcessError:
            if state == "stale":  # of no use any more: pure Python from now on, without warnings
                shutil.rmtree(final, ignore_errors=True)
            raise
        built = sorted(p.relative_to(out / "sim").as_posix() for p in (out / "sim").rglob("*") if p.is_file())
        (out / "manifest.json").write_text(
            json.dumps(
                {"fingerprint": fp, "modules": list(HOT), "files": built, "python": sys.version},
                indent=1,
            )
            + "\n"
        )
        staged = final.parent / (final.name + ".new")
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(out, staged)
        # the smoke run sees the staged build as the real one: swap, and swap back on failure
        old = final.parent / (final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        staged.rename(final)
        try:
            subprocess.run(
                [sys.executable, "-c", _SMOKE],
                cwd=root,
                check=True,
                env={k: v for k, v in os.environ.items() if k != ENV_PURE},
            )
        except subprocess.CalledProcessError:
            shutil.rmtree(final, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(old, ignore_errors=True)
    print(f"[sim-native] compiled {len(HOT)} modules into {final}")
    return final


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="sim.native", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("command", choices=["build", "status", "clean"])
    ap.add_argument("--force", action="store_true", help="build even when fresh")
    ap.add_argument("--verbose", action="store_true", help="show the compiler's output")
    args = ap.parse_args(argv)
    if args.command == "status":
        state, d = status()
        print(f"{state} {d}")
        return 0
    if args.command == "clean":
        shutil.rmtree(build_dir(), ignore_errors=True)
        return 0
    try:
        build(force=args.force, quiet=not args.verbose)
    except subprocess.CalledProcessError as e:
        print(
            f"[sim-native] build failed ({e.cmd[0]} exited with {e.returncode}); "
            "--verbose shows the compiler's output",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
