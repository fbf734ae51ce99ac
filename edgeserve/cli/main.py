"""``edgeserve``: one command, one subcommand per part of the product.

Each subcommand lives in its own module under :mod:`edgeserve.cli` and exposes
``add_parser(subparsers, help_)``, which registers its parser and sets ``func`` to the function
that runs it. Only the module of the subcommand being run is imported: ``edgeserve --help`` lists
the subcommands from :data:`SUBCOMMANDS` alone, and ``edgeserve serve`` never imports the
simulator (SimPy) or the terminal UI (Textual), so a host without them can still serve.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

# (subcommand, module, one-line help) — the help strings are what `edgeserve --help` shows.
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("serve", "edgeserve.cli.serve", "run the process-split OpenAI-compatible VLM server"),
    ("bench", "edgeserve.cli.bench", "load-test an OpenAI-compatible server; preprocessing benchmark"),
    ("trace", "edgeserve.cli.trace", "inspect and export recorded traces (Perfetto/Chrome JSON)"),
    ("sim", "edgeserve.cli.sim", "simulate edge devices, networks and offload policies"),
    ("tui", "edgeserve.cli.tui", "terminal UI for a live server, a simulation or a recorded trace"),
    ("calibrate", "edgeserve.cli.calibrate", "fit simulator device profiles from recorded traces"),
    ("models", "edgeserve.cli.models", "build and inspect the offline models (tiny Qwen2-VL)"),
    ("gateway", "edgeserve.cli.gateway", "run offload policies live in front of local and cloud servers"),
]
_OWN_PACKAGES = {"edgeserve", "mm_preproc", "sim", "tui", "models"}


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` asks for (its first word), or None (``--help``, nothing, a typo)."""
    names = {name for name, _, _ in SUBCOMMANDS}
    return argv[0] if argv and argv[0] in names else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``edgeserve`` parser with ``command``'s full parser; the others only by name and help.

    A subcommand registered by name alone is never run: :func:`parse_args` builds the parser for
    the subcommand its arguments name.
    """
    parser = argparse.ArgumentParser(
        prog="edgeserve",
        description="Serve vision-language models where CPU image work, heat and network decide "
        "the speed; simulate edge devices; watch both in a terminal UI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_ in SUBCOMMANDS:
        if name != command:
            sub.add_parser(name, help=help_)
            continue
        mod = _load(module)
        if mod is None:
            p = sub.add_parser(name, help=f"{help_} [not available yet]")
            p.set_defaults(func=_not_there(name))
        else:
            mod.add_parser(sub, help_)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` (without the program name), importing only the subcommand it names."""
    return build_parser(command_of(argv)).parse_args(list(argv))


def _load(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        return None


def _not_there(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(f"edgeserve {name}: not available in this version yet.", file=sys.stderr)
        return 2

    return run


def _missing_package(command: str, e: ModuleNotFoundError) -> int:
    print(f"edgeserve {command}: it needs the Python package '{e.name}', which is not installed "
          f"in this environment ({sys.executable}). Install the project's requirements "
          "(`make` does), or `pip install` that package, and run the command again.",
          file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_of(argv) or "--help"
    try:
        args = parse_args(argv)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as e:
        if not e.name or e.name.split(".")[0] in _OWN_PACKAGES:
            raise
        return _missing_package(command, e)


if __name__ == "__main__":
    sys.exit(main())
