"""``edgeserve trace``: inspect and export recorded traces.

* ``edgeserve trace export FILE --perfetto [-o OUT]`` writes Chrome-trace JSON (rows: workers,
  engine steps, stalls; one async track per request) for https://ui.perfetto.dev.
* ``edgeserve trace summary FILE`` prints request outcomes, latency percentiles, engine busy
  time and stall time.
* ``edgeserve trace split FILE --out-dir DIR`` writes each run of a trace (the stretches between
  idle gaps: one load of a rate sweep each) as a trace of its own, for ``calibrate validate``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction, help_: str) -> None:
    p = subparsers.add_parser("trace", help=help_, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    e = sub.add_parser("export", help="convert a trace to Chrome-trace JSON (Perfetto)",
                       description="Convert a JSON Lines trace into Chrome-trace JSON whose rows "
                       "are the preprocessing workers, the engine's steps and its stalls.")
    e.add_argument("file", metavar="FILE", help="trace written by `edgeserve serve --trace`")
    e.add_argument("--perfetto", action="store_true", required=True,
                   help="Chrome-trace JSON, as Perfetto and chrome://tracing read it")
    e.add_argument("-o", "--output", metavar="OUT",
                   help="output file (default: FILE with the suffix .perfetto.json)")
    e.set_defaults(func=run_export)
    s = sub.add_parser("summary", help="outcomes, latencies, engine busy and stall time",
                       description="Summarize a trace: request outcomes, TTFT/E2E percentiles, "
                       "engine busy seconds and stall seconds.")
    s.add_argument("file", metavar="FILE")
    s.set_defaults(func=run_summary)
    sp = sub.add_parser("split", help="one trace per run (the loads of a rate sweep)",
                        description="Split a trace at idle gaps (no request in flight for "
                        "--idle-s) into one trace per run, each with the headers, its requests, "
                        "engine steps and samples; runs with fewer than --min-requests requests "
                        "(a warm-up) are left out. Writes DIR/STEM.runK.jsonl.")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--out-dir", required=True, metavar="DIR")
    sp.add_argument("--idle-s", type=float, default=2.0,
                    help="a gap with no request in flight this long ends a run (default 2)")
    sp.add_argument("--min-requests", type=int, default=20,
                    help="leave out runs with fewer requests (default 20)")
    sp.set_defaults(func=run_split)


def run_export(args: argparse.Namespace) -> int:
    from edgeserve.records import TraceError
    from edgeserve.trace_export import export_perfetto

    out = Path(args.output) if args.output else Path(args.file).with_suffix(".perfetto.json")
    try:
        n = export_perfetto(args.file, out)
    except (OSError, TraceError) as e:
        print(f"edgeserve trace export: {e}", file=sys.stderr)
        return 1
    print(f"wrote {n} events to {out} (open it at https://ui.perfetto.dev)")
    return 0


def run_split(args: argparse.Namespace) -> int:
    from edgeserve.records import TraceError
    from edgeserve.trace_split import split_trace

    try:
        pieces = split_trace(args.file, args.out_dir, idle_s=args.idle_s,
                             min_requests=args.min_requests)
    except (OSError, TraceError, ValueError) as e:
        print(f"edgeserve trace split: {e}", file=sys.stderr)
        return 1
    if not pieces:
        print(f"edgeserve trace split: no run of at least {args.min_requests} requests in "
              f"{args.file}", file=sys.stderr)
        return 1
    for path, run in pieces:
        span = run.end_s - run.start_s
        print(f"{path}: {run.requests} requests over {span:.1f} s "
              f"(t {run.start_s:.1f} … {run.end_s:.1f} s)")
    return 0


def run_summary(args: argparse.Namespace) -> int:
    from collections import Counter

    import numpy as np

    from edgeserve.records import RequestRecord, ResourceSample, TraceError, read_trace

    outcomes: Counter[str] = Counter()
    ttft, e2e = [], []
    busy_s = stall_s = span_s = 0.0
    last_t: float | None = None
    try:
        for item in read_trace(args.file):
            if isinstance(item, RequestRecord):
                outcomes[item.outcome.value] += 1
                if item.ttft_s is not None:
                    ttft.append(item.ttft_s)
                if item.e2e_s is not None and item.outcome.value == "ok":
                    e2e.append(item.e2e_s)
            elif isinstance(item, ResourceSample):
                if last_t is not None:
                    span_s += item.t_s - last_t
                    busy_s += item.engine_busy * (item.t_s - last_t)
                last_t = item.t_s
                stall_s += item.stall_s
    except (OSError, TraceError) as e:
        print(f"edgeserve trace summary: {e}", file=sys.stderr)
        return 1
    print("requests: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    for name, xs in (("TTFT", ttft), ("E2E", e2e)):
        if xs:
            p50, p90, p99 = np.percentile(xs, [50, 90, 99])
            print(f"{name} s: p50 {p50:.4f}  p90 {p90:.4f}  p99 {p99:.4f}  (n={len(xs)})")
    print(f"sampled span {span_s:.1f} s: engine busy {busy_s:.2f} s, stall {stall_s:.2f} s")
    return 0
