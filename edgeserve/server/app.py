"""The HTTP side of ``edgeserve serve`` (aiohttp) and the server's start-up and shutdown.

Routes:

* ``POST /v1/chat/completions`` — OpenAI chat completions with images (see :mod:`.chat`);
* ``GET /v1/models`` — the one served model, with its family (``qwen2_vl``, ``qwen3_vl``, …);
* ``GET /health`` — 200 with the worker and engine pids once serving; 503 while draining;
* ``GET /metrics`` — Prometheus text: ``edgeserve_*`` and vLLM's ``vllm:*`` metrics;
* ``GET /v1/events`` — Server-Sent Events: each event's ``data`` is one trace line
  (:func:`edgeserve.records.encode`): a ``request`` record when a request finishes and a
  ``sample`` every ``--sample-interval``. The first event is the trace ``header``.

Start-up order: workers, then the engine (tens of seconds on CPU), then the warm-up requests
(:mod:`edgeserve.warmup`), then the HTTP listener — so a ``/health`` that answers at all means
ready, and warm. Shutdown (SIGTERM/SIGINT): stop admitting (503),
wait for in-flight requests up to ``--drain-timeout``, cancel the rest (their engine requests are
aborted), then stop the listener, workers and engine, and close the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from edgeserve import auto_defaults, hardware, records
from edgeserve.config import EngineCorePlacement, PreprocMode, ServeConfig
from edgeserve.console import say
from edgeserve.encoder import EncoderSpec, check_encoder
from edgeserve.engine import Engine
from edgeserve.family_paths import resolve_paths
from edgeserve.metrics import Metrics
from edgeserve.placement import colocate_engine_core
from edgeserve.preproc_pool import shm
from edgeserve.preproc_pool.inline import InlinePreproc
from edgeserve.preproc_pool.messages import PreprocParams
from edgeserve.preproc_pool.pool import PreprocPool
from edgeserve.server.admission import Admission
from edgeserve.server.chat import handle_chat
from edgeserve.server.context import ServerContext
from edgeserve.server.engine_restart import watch_engine
from edgeserve.server.media import MediaPolicy
from edgeserve.stalls import StallMeter
from edgeserve.tracing import Recorder, ResourceSampler, host_name, process_layout
from edgeserve.warmup import warm_up

log = logging.getLogger("edgeserve.serve")
CTX = web.AppKey("ctx", ServerContext)


def build_app(ctx: ServerContext) -> web.Application:
    app = web.Application(client_max_size=ctx.config.max_image_bytes * 2 + (1 << 20))
    app[CTX] = ctx

    async def chat(request: web.Request) -> web.StreamResponse:
        return await handle_chat(ctx, request)

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/events", events)
    return app


async def models(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return web.json_response({"object": "list", "data": [{
        "id": ctx.config.model_name, "object": "model", "created": int(time.time()),
        "owned_by": "edgeserve", "max_model_len": ctx.config.engine.max_model_len,
        "family": ctx.config.preproc_spec.family.value,
    }]})


async def health(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    p = ctx.preproc
    workers: list[dict[str, object]] = []
    if isinstance(p, PreprocPool):
        workers = [{"index": s.index, "pid": s.pid, "ready": s.ready, "busy": s.busy,
                    "restarts": s.restarts} for s in p.slots]
        if p.params.encoder is not None:  # preproc or encode: where a busy worker is
            for w, s in zip(workers, p.slots, strict=True):
                w["stage"] = s.stage
    body = {
        "status": "draining" if ctx.draining else "ok",
        "mode": ctx.config.mode.value,
        "pid": os.getpid(),
        "workers": workers,
        "inflight": ctx.inflight,
        "engine": {"running": ctx.engine.state.running, "waiting": ctx.engine.state.waiting,
                   "aborted_total": ctx.engine.state.aborted_total,
                   "restarting": ctx.engine_restarting, "restarts": ctx.engine_restarts},
    }
    broken = getattr(p, "broken", None)
    if broken:
        body["error"] = broken
    elif ctx.engine_restarting or ctx.engine.errored:
        body["error"] = "the vLLM engine died; a new one is starting"
    status = 503 if ctx.draining or ctx.engine.errored or ctx.engine_restarting or broken else 200
    return web.json_response(body, status=status)


async def metrics(request: web.Request) -> web.Response:
    pool = request.app[CTX].preproc
    if isinstance(pool, PreprocPool):
        request.app[CTX].recorder.metrics.observe_worker_restarts(
            sum(s.restarts for s in pool.slots))
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    q = ctx.recorder.hub.subscribe()
    try:
        await resp.write(b"data: " + records.encode(ctx.recorder.header).rstrip(b"\n") + b"\n\n")
        while True:
            line = await q.get()
            if line is None:
                break
            await resp.write(b"data: " + line.rstrip(b"\n") + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        ctx.recorder.hub.unsubscribe(q)
    return resp


# ---- running ----------------------------------------------------------------------------
def dump_tasks() -> None:
    """Every asyncio task's stack, to standard error (the engine log once the engine has
    started): what the requests of a server that seems stuck are waiting on."""
    tasks = asyncio.all_tasks()
    print(f"--- {len(tasks)} asyncio task(s) ---", file=sys.stderr)
    for task in tasks:
        print(f"task {task.get_name()}:", file=sys.stderr)
        for line in awaited_frames(task.get_coro()):
            print(f"  {line}", file=sys.stderr)
    sys.stderr.flush()


def awaited_frames(coro: Any) -> list[str]:
    """Where a suspended coroutine waits: its frame, then the frame of what it awaits, down the
    chain of coroutines, async generators and generators (``Task.print_stack`` shows only the
    outermost)."""
    out: list[str] = []
    while coro is not None and len(out) < 40:
        frame = (getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
                 or getattr(coro, "gi_frame", None))
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        coro = (getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
                or getattr(coro, "gi_yieldfrom", None))
    return out


async def serve(cfg: ServeConfig, ready_message: bool = True) -> int:
    """Run the server until SIGTERM/SIGINT, or until a dead engine cannot be replaced; returns
    the exit status (0 after a clean shutdown, 1 when no engine could be started again)."""
    loop = asyncio.get_running_loop()
    # `kill -USR2 PID`: where a stuck server waits. Every thread's stack at once (even with the
    # event loop blocked), then every asyncio task's when the loop next runs
    loop.add_signal_handler(signal.SIGUSR2, dump_tasks)
    faulthandler.register(signal.SIGUSR2, all_threads=True, chain=True)
    stale = shm.sweep_stale()
    if stale:
        log.warning("removed %d shared-memory segments left by dead servers", len(stale))
    cfg, fallbacks = resolve_paths(cfg)  # paths this model family cannot take
    for line in fallbacks:
        say(line)
    cfg, choices = auto_defaults.resolve(cfg, hardware.detect())  # dtype, encoder, workers
    for line in choices:
        say(line)
    spec = check_encoder(cfg)  # before anything starts: a missing or foreign export fails here
    if spec is not None:
        say(_encoder_line(cfg, spec))
    meter = StallMeter(time.monotonic())
    params = PreprocParams(min_pixels=int(cfg.min_pixels or 0), max_pixels=int(cfg.max_pixels or 0),
                           max_image_pixels=cfg.max_image_pixels,
                           max_image_bytes=cfg.max_image_bytes,
                           backend=cfg.preproc_backend, fast_decode=cfg.fast_decode,
                           encoder=spec, spec=cfg.preproc_spec)
    preproc: PreprocPool | InlinePreproc
    if cfg.mode is PreprocMode.SPLIT:
        preproc = PreprocPool(int(cfg.workers or 1), params, cfg.max_pending)
    else:
        preproc = InlinePreproc(params, cfg.max_pending)
    # Reserve the port before the engine's tens of seconds of start-up (bound, not listening, so
    # a client's /health is refused rather than left waiting): a port in use fails at once.
    sock = bind_socket(cfg.host, cfg.port)
    engine = Engine(cfg, meter)
    warm_steps: list[records.EngineStep] = []  # into the trace once its header is known
    engine.state.on_step = warm_steps.append
    try:
        await preproc.start()
        engine.start()
        warm = await warm_up(cfg, engine, preproc) if cfg.warmup else None
    except BaseException:
        sock.close()
        await preproc.close()
        engine.shutdown()
        shm.sweep(os.getpid())
        raise
    if warm is not None:
        say(warm.line())
    if cfg.engine_core_placement is EngineCorePlacement.WITH_WORKER:
        moved = colocate_engine_core({p for p in preproc.worker_pids() if p is not None})
        if moved is not None:
            say(moved.line())
    meta: dict[str, object] = {"model": cfg.model_name, "family": cfg.preproc_spec.family.value,
                               "mode": cfg.mode.value, "dtype": cfg.engine.dtype,
                               "workers": cfg.workers if cfg.mode is PreprocMode.SPLIT else 0,
                               "min_pixels": cfg.min_pixels, "max_pixels": cfg.max_pixels,
                               "host": host_name(), "pid": os.getpid(),
                               "host_cores": len(os.sched_getaffinity(0)),
                               "max_pending": cfg.max_pending, "max_inflight": cfg.max_inflight,
                               "max_engine_queue": cfg.max_engine_queue,
                               "engine": engine.describe(),
                               "processes": process_layout(preproc.worker_pids())}
    if fallbacks:
        meta["fallbacks"] = fallbacks
    if spec is not None:
        meta["encoder"] = {"kind": cfg.encoder.value, "graph": spec.graph,
                           "provider": spec.provider, "threads": spec.intra_op_threads}
    if warm is not None:
        meta["warmup"] = warm.as_meta()
    recorder = Recorder(cfg.trace, Metrics(), meta)
    for step in warm_steps:
        recorder.step(step)
    engine.state.on_step = recorder.step
    ctx = ServerContext(
        config=cfg, engine=engine, preproc=preproc, meter=meter, recorder=recorder,
        media=MediaPolicy(cfg.allowed_media_dir, cfg.allow_http_media, cfg.http_timeout_s,
                          cfg.max_image_bytes),
        host=host_name(),
        admission=Admission(int(cfg.max_engine_queue or 1), cfg.max_pending),
    )
    sampler = ResourceSampler(cfg.sample_interval_s, recorder, meter, ctx.snapshot)
    sampler.start()
    runner = web.AppRunner(build_app(ctx), handler_cancellation=True, access_log=None,
                           shutdown_timeout=5.0)
    await runner.setup()
    site = web.SockSite(runner, sock)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, ctx.stop.set)
    watchdog = asyncio.create_task(watch_engine(ctx))
    try:
        await site.start()
        if ready_message:
            say(f"ready on http://{cfg.host}:{cfg.port} "
                f"(mode={cfg.mode.value}, workers={cfg.workers}, model={cfg.model_name})")
        await ctx.stop.wait()
        await _drain(ctx)
    finally:
        watchdog.cancel()
        recorder.hub.close()  # ends /v1/events streams so the listener can close
        await runner.cleanup()
        await sampler.stop()
        await preproc.close()
        engine.shutdown()
        recorder.close()
        shm.sweep(os.getpid())
    return 1 if ctx.engine_died else 0


def _encoder_line(cfg: ServeConfig, spec: EncoderSpec) -> str:
    where = ("in each preprocessing worker" if cfg.mode is PreprocMode.SPLIT
             else "in the frontend (inline mode)")
    runtime = "OpenVINO" if spec.provider.startswith("openvino:") else "ONNX Runtime"
    return (f"vision encoder: {spec.graph} on {runtime} {spec.provider}, "
            f"{spec.intra_op_threads} intra-op thread(s) {where}; vLLM receives image embeddings "
            "and does not load its own tower")


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); ``OSError`` when it is taken."""
    family, type_, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except BaseException:
        sock.close()
        raise
    return sock


async def _drain(ctx: ServerContext) -> None:
    """Stop admitting; wait for in-flight requests up to the drain timeout; cancel the rest."""
    ctx.draining = True
    # nothing in flight can finish once the engine is dead: do not wait for it
    deadline = time.monotonic() + (0.0 if ctx.engine_died else ctx.config.drain_timeout_s)
    while ctx.inflight > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if ctx.inflight > 0 and ctx.handler_tasks:
        log.warning("drain timeout: cancelling %d in-flight requests", len(ctx.handler_tasks))
        for t in list(ctx.handler_tasks):
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait(list(ctx.handler_tasks), timeout=5.0)
