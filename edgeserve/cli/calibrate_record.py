"""``edgeserve calibrate record``: a designed calibration run (:mod:`edgeserve.bench.calibration_record`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from edgeserve.bench.calibration_schedule import Schedule, ScheduleConfig, design, format_schedule


def _schedule(args: argparse.Namespace) -> Schedule:
    from edgeserve.config import ServeConfig

    # the driven server's limits: the default server's, or those given for a server of another
    # model or size (--model, --max-num-seqs, --max-pixels)
    serve = ServeConfig() if args.record_model is None else ServeConfig(model=args.record_model)
    if args.record_max_pixels is not None:
        serve = serve.replace(max_pixels=args.record_max_pixels)
    seqs = args.record_max_num_seqs or serve.engine.max_num_seqs
    return design(ScheduleConfig(budget_s=args.budget_s, max_num_seqs=seqs,
                                 max_pixels=int(serve.max_pixels or 0),
                                 min_pixels=int(serve.min_pixels or 0),
                                 factor=serve.spec.factor if serve.spec else 28,
                                 image_rate_rps=args.image_rate))


def run_record(args: argparse.Namespace) -> int:
    if args.out is None:
        print("edgeserve calibrate record: --out TRACE.jsonl is required", file=sys.stderr)
        return 2
    if args.url is None and (args.record_model or args.record_max_num_seqs or args.record_max_pixels):
        print("edgeserve calibrate record: --model, --max-num-seqs and --max-pixels describe a "
              "server given with --url; without it the default server is started",
              file=sys.stderr)
        return 2
    try:
        schedule = _schedule(args)
    except ValueError as e:
        print(f"edgeserve calibrate record: {e}", file=sys.stderr)
        return 2
    print(format_schedule(schedule), flush=True)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_record(args.url, out, schedule))
    except RuntimeError as e:
        print(f"edgeserve calibrate record: {e}", file=sys.stderr)
        return 1


async def _record(url: str | None, out: Path, schedule: Schedule) -> int:
    import aiohttp
    import msgspec

    from edgeserve.bench.calibration_record import Recorder, annotate_header
    from edgeserve.bench.compare import ServerKind, server_argv
    from edgeserve.bench.runner import fetch_model_id
    from edgeserve.bench.server_process import ServerProcess
    from edgeserve.config import DEFAULT_MODEL_DIR
    from edgeserve.net import free_port
    from edgeserve.records import TraceHeader

    server = None
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = server_argv(ServerKind.EDGESERVE_SPLIT, DEFAULT_MODEL_DIR, port,
                           f"--trace {out} --engine-log {out.with_suffix('.engine.log')}")
        print(f"starting the default server on {url} (trace {out})", flush=True)
        server = ServerProcess(argv, out.with_suffix(".server.log"), port=port,
                               ready_path="/health").start()
    try:
        if server is not None:
            await server.wait_ready(600.0)
        try:
            model = await fetch_model_id(url)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError) as e:
            raise RuntimeError(f"cannot reach a server at {url}: {e}") from None
        rec = Recorder(url, model, schedule, log=lambda m: print(m, flush=True))
        print("building the image requests…", flush=True)
        rec.prepare()
        results = await rec.run()
    finally:
        if server is not None:
            server.stop()
    if server is not None:
        annotate_header(out, schedule.header(), results)
        print(f"wrote {out}: calibrate it with `edgeserve calibrate {out} --out PROFILE.yaml`")
    else:
        head = TraceHeader(producer="edgeserve calibrate record",
                           meta={"calibration_schedule": schedule.header(), "url": url})
        out.write_bytes(msgspec.json.encode(head) + b"\n")
        print(f"wrote the schedule to {out}; the records are in the server's own --trace file")
    return 0 if sum(r.ok for r in results) else 1
