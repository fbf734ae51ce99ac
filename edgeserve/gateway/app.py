"""The gateway's HTTP side (aiohttp, as ``edgeserve serve``) and its background loops.

Routes: ``POST /v1/chat/completions`` (:mod:`.chat`), ``GET /v1/models``, ``GET /health`` (the
device state the policy sees, the policy and the policies it can switch to), ``GET /metrics``
(Prometheus text), ``GET /v1/events`` (server-sent events, as ``edgeserve serve``'s: the trace
header, then each request's record, masked as in the trace) and ``POST /admin/policy``
(``{"policy": NAME, "params": {...}}``: the next request is decided by the new policy). Behind
``--api-key`` every route but ``/health`` needs the key; the rate limit applies to all of them.
Background loops read the local servers' ``/metrics``, probe each cloud endpoint's round trip and
sample the sensors.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import signal
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from edgeserve import records
from edgeserve.gateway.auth import bearer, retry_after_header
from edgeserve.gateway.chat import error, handle_chat
from edgeserve.gateway.state import GatewayState
from sim.core.policies import POLICIES
from sim.scenario.config import PolicyConfig
from sim.scenario.schema import ConfigError

STATE = web.AppKey("state", GatewayState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = request.app[STATE]
    who = request.remote or "?"
    if state.config.api_keys and request.path != "/health":
        key = bearer(request.headers.get("Authorization"))
        if key not in state.config.api_keys:
            return error(401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                         "authentication_error")
        who = f"key:{key}"
    wait_s = state.limiter.retry_after_s(who)
    if wait_s > 0:
        return error(429, f"rate limit of {state.config.rate_limit_per_s:g} requests/s exceeded",
                     "rate_limit_exceeded", {"Retry-After": retry_after_header(wait_s)})
    return await handler(request)


def build_app(state: GatewayState) -> web.Application:
    app = web.Application(middlewares=[guard],
                          client_max_size=state.config.max_image_bytes * 2 + (1 << 20))
    app[STATE] = state

    async def chat(request: web.Request) -> web.StreamResponse:
        return await handle_chat(state, request)

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/events", events)
    app.router.add_post("/admin/policy", set_policy)
    return app


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    data = [{"id": state.config.model_name, "object": "model", "created": int(time.time()),
             "owned_by": "edgeserve-gateway"}]
    for t in state.targets:
        for size, mid in t.cfg.models.items():
            data.append({"id": mid, "object": "model", "owned_by": t.label, "size": size})
    return web.json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    d = state.device
    r = d.sensors.reading
    now = time.monotonic()
    return web.json_response({
        "status": "ok", "policy": state.policy_name, "policies": list(POLICIES),
        "device": {"queue_len": d.queue_len, "running": d.running, "temp_c": r.temp_c,
                   "temp_source": r.temp_source.value, "battery_fraction": r.battery_fraction,
                   "battery_source": r.battery_source.value, "cpu_util": r.cpu_util},
        "targets": [{"name": t.label, "up": t.up(now), "queue_len": t.queue_len,
                     "running": t.running, "inflight": t.inflight, "calls": t.calls,
                     "failures": t.failures, "service_s": t.estimate.service.value,
                     "rtt_s": t.link.rtt_s.value} for t in state.targets],
    })


async def events(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    q = state.hub.subscribe()
    try:
        await resp.write(b"data: " + records.encode(state.header).rstrip(b"\n") + b"\n\n")
        while True:
            line = await q.get()
            if line is None:
                break
            await resp.write(b"data: " + line.rstrip(b"\n") + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        state.hub.unsubscribe(q)
    return resp


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    for t in state.targets:
        state.metrics.queue.labels(t.label).set(t.queue_len)
    return web.Response(body=generate_latest(state.metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def set_policy(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        doc = json.loads(await request.read())
        name = doc["policy"]
        params = doc.get("params") or {}
        if not isinstance(name, str) or not isinstance(params, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return error(400, 'expected {"policy": NAME, "params": {...}}', "invalid_request_error")
    try:
        state.set_policy(PolicyConfig(kind=name, params=params))
    except (ConfigError, ValueError, TypeError) as e:
        return error(400, f"{e} (known: {', '.join(POLICIES)})", "invalid_request_error")
    return web.json_response({"policy": state.policy_name, "params": params})


# ---- background loops ---------------------------------------------------------------------
async def _every(stop: asyncio.Event, interval_s: float, fn: Callable[[], Awaitable[None]]) -> None:
    while not stop.is_set():
        with contextlib.suppress(Exception):
            await fn()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


async def poll_local_metrics(state: GatewayState) -> None:
    assert state.session is not None
    timeout = aiohttp.ClientTimeout(total=max(1.0, state.config.metrics_poll_s * 4))
    for t in state.locals:
        try:
            async with state.session.get(t.cfg.root_url + "/metrics", timeout=timeout) as r:
                if r.status == 200:
                    t.read_metrics(await r.text())
        except (aiohttp.ClientError, TimeoutError):
            t.polled_waiting = t.polled_running = 0


async def probe_clouds(state: GatewayState) -> None:
    assert state.session is not None
    timeout = aiohttp.ClientTimeout(total=5.0)
    for t in state.clouds:
        headers = {"Authorization": f"Bearer {t.api_key}"} if t.api_key else {}
        t0 = time.monotonic()
        try:
            async with state.session.get(t.cfg.base_url + "/models", headers=headers,
                                         timeout=timeout) as r:
                await r.read()
                if r.status < 500:
                    t.link.observe_rtt(time.monotonic() - t0)
                    if t.down_until_s and r.status == 200:
                        t.down_until_s = 0.0  # answering again
        except (aiohttp.ClientError, TimeoutError):
            t.mark_down()


async def run(state: GatewayState, on_ready: Callable[[str], None]) -> int:
    cfg = state.config
    loop = asyncio.get_running_loop()
    state.session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None))
    runner = web.AppRunner(build_app(state), access_log=None, shutdown_timeout=5.0,
                           handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, state.stop.set)
    tasks = [
        asyncio.create_task(state.device.sensors.run(state.stop)),
        asyncio.create_task(_every(state.stop, cfg.metrics_poll_s,
                                   lambda: poll_local_metrics(state))),
        asyncio.create_task(_every(state.stop, cfg.probe_s, lambda: probe_clouds(state))),
    ]
    gc.freeze()  # what start-up made lives as long as the process: no collection walks it again
    try:
        await site.start()
        on_ready(f"ready on http://{cfg.host}:{cfg.port} (policy={state.policy_name}; "
                 f"targets: {', '.join(t.label for t in state.targets)}; "
                 f"{state.device.sensors.describe()})")
        await state.stop.wait()
    finally:
        state.hub.close()  # ends /v1/events streams so the listener can close
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await state.session.close()
        if state.trace is not None:
            state.trace.close()
    return 0
