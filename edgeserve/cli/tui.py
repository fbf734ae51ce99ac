"""``edgeserve tui``: the terminal UI for a live server, a simulation or a recorded trace.

Imports of Textual and of the UI happen inside :func:`run`, so ``edgeserve --help`` stays light.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DESCRIPTION = """\
Watch CPU/GPU pipeline stalls, queues and device heat in the terminal.

Exactly one source:
  --connect URL      an edgeserve server (its /v1/events stream and /metrics), a stock vLLM
                     server (its /metrics alone; panels it cannot fill say why), or an
                     edgeserve gateway (its decisions in panel 6; o switches its policy live)
  --sim [SCENARIO]   run a simulation behind the UI (a scenario YAML or built-in name; the
                     default scenario without one); pause, step, speed, switch policy (o)
  --replay TRACE     play back a recorded trace (JSON Lines); pause, step, seek, speed

Keys: q quit, ? help, p pause, / filter requests, Tab or 1-7 panels, + - speed, s step,
[ ] seek 10 s, { } seek 60 s, o policy (sim, gateway), d next device (sim), Enter open a request.
"""


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def add_parser(subparsers: argparse._SubParsersAction, help_: str) -> None:
    p = subparsers.add_parser(
        "tui",
        help=help_,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--connect", metavar="URL", help="server base URL, e.g. http://127.0.0.1:8000")
    src.add_argument(
        "--sim",
        metavar="SCENARIO",
        nargs="?",
        const="",
        help="simulate SCENARIO (YAML path or built-in name; default scenario if omitted)",
    )
    src.add_argument("--replay", metavar="TRACE", help="recorded trace file (JSON Lines)")
    p.add_argument(
        "--refresh",
        type=_positive,
        default=1.0,
        metavar="S",
        help="seconds between redraws, independent of the data rate (default 1)",
    )
    p.add_argument(
        "--speed",
        type=_positive,
        default=None,
        metavar="X",
        help="source seconds per wall second for --sim and --replay "
        "(default: 10 for --sim, 1 for --replay)",
    )
    p.add_argument(
        "--layout",
        choices=["auto", "compact", "full"],
        default="auto",
        help="compact: one panel at a time (80x24); full: all panels (about 160x48); "
        "auto picks by terminal size (default)",
    )
    p.add_argument(
        "--window",
        type=_positive,
        default=60.0,
        metavar="S",
        help="percentile and error window in source seconds (default 60)",
    )
    p.add_argument("--paused", action="store_true", help="start paused (--sim, --replay)")
    p.add_argument(
        "--start",
        type=float,
        default=None,
        metavar="T",
        help="--replay: start at trace time T (seconds on the trace's clock)",
    )
    p.add_argument("--policy", default=None, help="--sim: start with this offload policy")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="--sim: override a scenario value, e.g. --set duration_s=600 (repeatable)",
    )
    p.add_argument(
        "--trace",
        default=None,
        metavar="PATH",
        help="--sim: also write the simulation's trace to PATH",
    )
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> str | None:
    """A message for flags that do not fit the chosen source, or None."""
    if args.sim is None:
        for flag, value in (
            ("--policy", args.policy),
            ("--set", args.overrides),
            ("--trace", args.trace),
        ):
            if value:
                return f"{flag} applies to --sim only"
    if args.replay is None and args.start is not None:
        return "--start applies to --replay only"
    if args.connect is not None and (args.speed is not None or args.paused):
        return (
            "--speed and --paused apply to --sim and --replay; a live server runs at its own pace"
        )
    if args.connect is not None and not args.connect.startswith(("http://", "https://")):
        return f"--connect wants an http:// or https:// URL, got {args.connect!r}"
    if args.replay is not None and not Path(args.replay).is_file():
        return f"trace not found: {args.replay}"
    if args.sim is not None:
        # load the scenario before the screen switches, so a bad one reads as a plain message
        from sim.scenario.config import load_scenario, parse_override
        from sim.scenario.schema import ConfigError

        try:
            load_scenario(args.sim or None, [parse_override(o) for o in args.overrides])
        except (ConfigError, OSError, ValueError) as e:
            return f"cannot load scenario {args.sim or 'default'!r}: {e}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"edgeserve tui: {problem}", file=sys.stderr)
        return 2

    from tui.app import TuiApp
    from tui.config import Layout, TuiConfig
    from tui.sources.base import Source
    from tui.state import StateConfig

    try:
        config = TuiConfig(
            refresh_s=args.refresh,
            layout=Layout(args.layout),
            state=StateConfig(window_s=args.window),
        )
    except ValueError as e:
        print(f"edgeserve tui: {e}", file=sys.stderr)
        return 2

    source: Source
    if args.connect is not None:
        from tui.sources.live import LiveSource

        source = LiveSource(args.connect)
    elif args.replay is not None:
        from tui.sources.replay import ReplaySource

        source = ReplaySource(
            args.replay, speed=args.speed or 1.0, start_paused=args.paused, start_at_s=args.start
        )
    else:
        from tui.sources.simulation import SimulationSource

        source = SimulationSource(
            args.sim or None,
            speed=args.speed or 10.0,
            policy=args.policy,
            trace_path=args.trace,
            overrides=args.overrides,
            start_paused=args.paused,
        )
    app = TuiApp(source, config)
    app.run()
    return app.return_code or 0
