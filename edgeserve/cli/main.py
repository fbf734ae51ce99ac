"""``edgeserve``: one command, one subcommand per part of the product.

Each subcommand lives in its own module under :mod:`edgeserve.cli` and exposes
``add_parser(subparsers)``, which registers its parser and sets ``func`` to the function that runs
it. Modules are imported lazily so that ``edgeserve --help`` and the light subcommands never import
vLLM or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgeserve",
        description="Serve vision-language models where CPU image work, heat and network decide "
        "the speed; simulate edge devices; watch both in a terminal UI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_ in SUBCOMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            p = sub.add_parser(name, help=f"{help_} [not available yet]")
            p.set_defaults(func=_not_there(name))
            continue
        mod.add_parser(sub, help_)
    return parser


def _not_there(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(f"edgeserve {name}: not available in this version yet.", file=sys.stderr)
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
