"""``edgeserve serve --replicas N``: N replicas of the server behind one endpoint.

The frontend here does no image work; it forwards each request whole to one replica
(:mod:`edgeserve.replicas.replica`) and streams the answer back::

    client ──HTTP──▶ [replica frontend] ──least outstanding──▶ replica 0: edgeserve serve (GPU 0)
                                                          └──▶ replica 1: edgeserve serve (GPU 1)

Routing: the ready replica with the fewest requests outstanding (sent and not yet answered in
full), ties to the one that got fewest so far, so that an idle server alternates. A replica whose
``/health`` is not 200 (its engine died and a new one is starting, say) gets nothing until it is
ready again; a request it refuses before answering (503, 429, connection refused) is sent to the
next replica, so one replica's death costs only the requests its engine held.

``/health`` is 200 when every replica is ready and 503 otherwise, with each replica's state, pid,
port, GPUs or cores, outstanding and routed counts, and its own ``/health`` body. ``/metrics`` is
every replica's page with a ``replica`` label (:mod:`edgeserve.replicas.metrics_merge`) and the
frontend's own ``edgeserve_replica_*`` counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import aiohttp
from aiohttp import web

from edgeserve.config import ServeConfig
from edgeserve.console import say
from edgeserve.replicas.metrics_merge import merge_pages
from edgeserve.replicas.replica import Replica, ReplicaState

HEALTH_INTERVAL_S = 0.5
RETRIED_STATUSES = frozenset({429, 503})  # answered before any work: another replica may take it
HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                         "date", "server"})


def pick(replicas: Iterable[Replica], tried: set[int]) -> Replica | None:
    """The ready replica not yet tried with the fewest outstanding requests (then fewest routed)."""
    ready = [r for r in replicas if r.state is ReplicaState.READY and r.index not in tried]
    return min(ready, key=lambda r: (r.outstanding, r.routed_total, r.index), default=None)


class ReplicaFront:
    """The endpoint in front of the replicas: routing, health and metrics."""

    def __init__(self, cfg: ServeConfig, replicas: list[Replica]) -> None:
        self.cfg = cfg
        self.replicas = replicas
        self.http: aiohttp.ClientSession | None = None
        self.stop = asyncio.Event()
        self.draining = False

    # ---- routes -----------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.cfg.max_image_bytes * 2 + (1 << 20))
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if self.draining:
            return self._refuse(503, "the server is shutting down")
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        tried: set[int] = set()
        last: tuple[int, bytes, str] | None = None
        while (replica := pick(self.replicas, tried)) is not None:
            tried.add(replica.index)
            replica.outstanding += 1
            replica.routed_total += 1
            try:
                assert self.http is not None
                async with self.http.post(replica.url + request.path_qs, data=body,
                                          headers=headers) as up:
                    if up.status in RETRIED_STATUSES:
                        replica.failed_total += 1
                        last = (up.status, await up.read(), up.content_type)
                        continue
                    return await self._relay(request, up)
            except (TimeoutError, aiohttp.ClientConnectionError):
                replica.failed_total += 1
                replica.state = (ReplicaState.EXITED if replica.exited()
                                 else ReplicaState.UNAVAILABLE)
                continue
            finally:
                replica.outstanding -= 1
        if last is not None:
            return web.Response(status=last[0], body=last[1], content_type=last[2],
                                headers={"Retry-After": str(self.cfg.retry_after_s)})
        return self._refuse(503, "no replica is ready (see /health)")

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, headers={
            k: v for k, v in up.headers.items() if k.lower() not in HOP_HEADERS})
        await resp.prepare(request)
        async for chunk in up.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    def _refuse(self, status: int, message: str) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": "unavailable", "code": status}},
            status=status, headers={"Retry-After": str(self.cfg.retry_after_s)})

    async def models(self, request: web.Request) -> web.Response:
        for r in sorted(self.replicas, key=lambda r: r.state is not ReplicaState.READY):
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                assert self.http is not None
                async with self.http.get(r.url + "/v1/models") as up:
                    return web.json_response(await up.json(), status=up.status)
        return self._refuse(503, "no replica answers")

    async def health(self, request: web.Request) -> web.Response:
        ready = all(r.state is ReplicaState.READY for r in self.replicas)
        body = {
            "status": "draining" if self.draining else ("ok" if ready else "degraded"),
            "pid": os.getpid(),
            "replicas": [{"index": r.index, "state": r.state.value, "pid": r.pid, "port": r.port,
                          "placement": r.slot.describe(), "outstanding": r.outstanding,
                          "routed_total": r.routed_total, "failed_total": r.failed_total,
                          "health": r.health} for r in self.replicas],
        }
        return web.json_response(body, status=200 if ready and not self.draining else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        pages = await asyncio.gather(*(self._page(r) for r in self.replicas))
        own = self._own_metrics()
        return web.Response(text=own + merge_pages(pages), content_type="text/plain",
                            charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    async def _page(self, r: Replica) -> str | None:
        assert self.http is not None
        try:
            async with self.http.get(r.url + "/metrics") as up:
                return await up.text() if up.status == 200 else None
        except (TimeoutError, aiohttp.ClientError):
            return None

    def _own_metrics(self) -> str:
        rows = [
            ("edgeserve_replica_ready", "gauge", "1 when the replica answers /health with 200",
             lambda r: 1.0 if r.state is ReplicaState.READY else 0.0),
            ("edgeserve_replica_outstanding", "gauge", "requests sent to the replica, not done",
             lambda r: float(r.outstanding)),
            ("edgeserve_replica_routed_total", "counter", "requests sent to the replica",
             lambda r: float(r.routed_total)),
            ("edgeserve_replica_failed_total", "counter",
             "requests the replica refused or dropped before answering (sent elsewhere)",
             lambda r: float(r.failed_total)),
        ]
        out = []
        for name, kind, text, value in rows:
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            out += [f'{name}{{replica="{r.index}"}} {value(r)}' for r in self.replicas]
        return "\n".join(out) + "\n"

    # ---- replica states -------------------------------------------------------------------
    async def watch(self) -> None:
        """Poll every replica's process and ``/health`` until the server stops."""
        while not self.stop.is_set():
            await asyncio.gather(*(self._check(r) for r in self.replicas))
            await asyncio.sleep(HEALTH_INTERVAL_S)

    async def _check(self, r: Replica) -> None:
        before = r.state
        if r.exited():
            r.state = ReplicaState.EXITED
        else:
            assert self.http is not None
            try:
                async with self.http.get(r.url + "/health",
                                         timeout=aiohttp.ClientTimeout(total=5)) as up:
                    r.health = await up.json(content_type=None)
                    ok = up.status == 200
            except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError):
                ok = False
            if ok:
                r.state = ReplicaState.READY
            elif before is not ReplicaState.STARTING:
                r.state = ReplicaState.UNAVAILABLE
        if r.state is not before and before is not ReplicaState.STARTING:
            say(f"replica {r.index} ({r.slot.describe()}): {before.value} → {r.state.value}")
        if r.state is ReplicaState.EXITED and before is not ReplicaState.EXITED:
            say(f"replica {r.index} exited (code {r.proc.returncode if r.proc else '?'}); its "
                f"last lines ({r.log_path}):\n{r.log_tail(8)}", error=True)


async def serve_replicas(cfg: ServeConfig, replicas: list[Replica], start_timeout_s: float,
                         log_dir: Path) -> int:
    """Start the replicas, wait until all are ready, serve until SIGTERM/SIGINT; exit status 0,
    or 1 when a replica could not start."""
    from edgeserve.server.app import bind_socket

    loop = asyncio.get_running_loop()
    sock = bind_socket(cfg.host, cfg.port)  # a port in use fails before any engine starts
    front = ReplicaFront(cfg, replicas)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, front.stop.set)
    front.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
    for r in replicas:
        r.start()
        say(f"replica {r.index}: pid {r.pid} on {r.slot.describe()}, port {r.port} "
            f"(its lines: {r.log_path})")
    watcher = asyncio.create_task(front.watch())
    runner: web.AppRunner | None = None
    try:
        t0 = time.monotonic()
        while not all(r.state is ReplicaState.READY for r in replicas):
            broken = [r for r in replicas if r.state is ReplicaState.EXITED]
            if broken or time.monotonic() - t0 > start_timeout_s or front.stop.is_set():
                if broken:
                    say(f"replica {broken[0].index} failed to start, so the server stops; its "
                        f"last lines are above and in {broken[0].log_path}.", error=True)
                elif not front.stop.is_set():
                    say(f"the replicas were not all ready after {start_timeout_s:.0f} s; their "
                        f"lines are in {log_dir}.", error=True)
                return 0 if front.stop.is_set() and not broken else 1
            await asyncio.sleep(HEALTH_INTERVAL_S)
        runner = web.AppRunner(front.app(), handler_cancellation=True, access_log=None,
                               shutdown_timeout=5.0)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        say(f"ready on http://{cfg.host}:{cfg.port}: {len(replicas)} replicas "
            f"(tensor-parallel size {cfg.engine.tensor_parallel_size} each), least-outstanding "
            f"routing, model={cfg.model_name}; up after {time.monotonic() - t0:.0f} s")
        await front.stop.wait()
        front.draining = True
        return 0
    finally:
        watcher.cancel()
        for r in replicas:
            r.terminate()  # each drains its own requests (--drain-timeout)
        if runner is not None:
            await runner.cleanup()
        sock.close()
        await front.http.close()
        await asyncio.gather(*(asyncio.to_thread(r.wait, cfg.drain_timeout_s + 30.0)
                               for r in replicas))
