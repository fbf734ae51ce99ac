"""``POST /v1/chat/completions`` through the gateway: validate, decide, forward, fall back, record.

1. The body is parsed and validated by the server's own parser
   (:func:`edgeserve.server.openai_protocol.parse_chat_request`) and each ``data:`` image by its
   media rules, so a bad request gets the same 400 and message as from ``edgeserve serve``.
2. The policy decides on a :class:`~sim.core.job.Job` built from the request and the live device —
   the very ``Policy.decide`` the simulator calls.
3. ``drop`` answers 503 with the reason. Otherwise the targets are tried in order: for ``cloud``
   the up cloud endpoints, then the local servers; for ``local`` the local servers by load, then
   (unless ``local_overflow`` is off or the policy is ``always_local``) the clouds. A target that
   is unreachable, times out, answers 5xx or 429 passes the request on; the client sees one answer.
   With ``--mask-cloud`` a cloud target gets the request with its personal data behind numbered
   placeholders (:mod:`.outgoing`, :mod:`.pii`), and the answer gets the data back before the
   client sees it.
4. One :class:`~edgeserve.records.RequestRecord` is written with ``placement`` (``local:<name>``,
   ``cloud:<name>``, ``cache`` or ``drop``), ``decision_reason`` and the targets tried.

With a semantic cache (``--cache-capacity``), a request whose text has no personal data is first
looked up there (:mod:`.semantic_cache`); a hit answers at once, before the policy, as one body or,
for ``stream: true``, as SSE chunks (:mod:`.sse`). Answers are kept from streamed and non-streamed
misses alike.
With routes in the config (:mod:`.router`), the best route by similarity to its examples decides
the place and model next; the policy decides only when no route matches. The request's text is
embedded once for both: cache → route → policy.
"""

from __future__ import annotations

import time

import numpy as np
from aiohttp import web

from edgeserve.gateway.config import SMALL, Place
from edgeserve.gateway.live_job import build_job, request_text
from edgeserve.gateway.outgoing import Outgoing
from edgeserve.gateway.pii import mask
from edgeserve.gateway.question_guard import Question
from edgeserve.gateway.semantic_cache import Hit, context_key
from edgeserve.gateway.sse import completion_events
from edgeserve.gateway.state import GatewayState
from edgeserve.gateway.targets import Target
from edgeserve.gateway.upstream import CLIENT_LEFT, Failure, FailureKind, Relayed, call
from edgeserve.records import Outcome, RequestRecord
from edgeserve.server.media import MediaPolicy, check_data_url
from edgeserve.server.openai_protocol import (
    BadRequest,
    ChatRequest,
    error_body,
    image_urls,
    parse_chat_request,
)
from sim.core.job import Job
from sim.core.policies import Decision, Placement


def error(status: int, message: str, type_: str, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.json_response(error_body(message, type_, status), status=status, headers=headers)


def plan(state: GatewayState, decision: Decision) -> list[Target]:
    """The targets to try, in order: the decided place's first, then the other place's (unless a
    local decision may not overflow); targets marked down go last, as a last resort."""
    d = state.device
    if decision.placement is Placement.DROP:
        return []
    if decision.placement is Placement.CLOUD:
        order = d.cloud_order() + d.local_order()
    else:
        overflow = state.config.local_overflow and state.policy_name != "always_local"
        order = d.local_order() + (d.cloud_order() if overflow else [])
    now = time.monotonic()
    return [t for t in order if t.up(now)] + [t for t in order if not t.up(now)]


async def handle_chat(state: GatewayState, request: web.Request) -> web.StreamResponse:
    arrived = time.monotonic()
    body = await request.read()
    rec = RequestRecord(id=state.next_id(), arrived_s=arrived, device="gateway")
    try:
        req = validate(body, state.config.max_images_per_request, state.config.max_image_bytes)
        rec.deadline_s = deadline_s(request.headers.get("X-Deadline-Ms"), arrived)
    except BadRequest as e:
        rec.placement, rec.outcome, rec.error = "none", Outcome.REJECTED, str(e)
        rec.finished_s = time.monotonic()
        _record(state, rec)
        return error(400, str(e), "invalid_request_error")
    job = build_job(req, rec, state.device)
    text = request_text(req) if state.embedder is not None else ""
    vector = state.embedder.embed(text) if state.embedder is not None else None
    key = cache_key(state, req, text, vector)
    if key is not None and state.cache is not None:
        hit = state.cache.lookup(*key)
        if hit is not None:
            return await _answer_from_cache(state, request, req, rec, hit)
    decision = decide(state, job, vector)
    if decision.placement is Placement.DROP:
        return _finish_drop(state, rec, decision.reason)
    out = Outgoing(body, req.model, decision.resolution_scale)
    return await forward(state, request, req, out, decision, job, key)


def validate(body: bytes, max_images: int, max_image_bytes: int) -> ChatRequest:
    """The server's own parsing and image checks; raises :class:`BadRequest`."""
    req = parse_chat_request(body, max_images)
    media = MediaPolicy(None, False, 0.0, max_image_bytes)
    for url in image_urls(req):
        if url.startswith("data:"):
            check_data_url(url, media)
        elif not url.startswith(("http://", "https://")):
            raise BadRequest("the gateway forwards images as data: URLs or http(s) URLs; "
                             "file:// URLs name a file only the gateway's host can read")
    return req


def deadline_s(header: str | None, arrived_s: float) -> float | None:
    if not header:
        return None
    try:
        return arrived_s + float(header) / 1000.0
    except ValueError:
        raise BadRequest(f"X-Deadline-Ms must be a number of milliseconds, got {header!r}"
                         ) from None


def decide(state: GatewayState, job: Job, vector: np.ndarray | None = None) -> Decision:
    """The matching route's decision, else the policy's, with what it saw written into the job's
    record."""
    device, rec = state.device, job.rec
    match = state.router.match(vector) if state.router is not None and vector is not None else None
    decision = (match.decision if match is not None
                else state.policy.decide(job, device))
    reading = device.sensors.reading
    rec.decision_reason = decision.reason
    rec.decision_temp_c = round(reading.temp_c, 3)
    rec.sensor_source = reading.temp_source.value
    rec.resolution_scale = decision.resolution_scale
    rec.predicted_local_s = _finite(device.estimate_local_s(job))
    rec.predicted_cloud_s = _finite(device.estimate_cloud_s(job))
    rec.decision_queue = device.queue_len
    cloud = device.cloud
    if cloud is not None:
        rec.link_rtt_s = round(cloud.target.link.rtt_s.value, 6)
        rec.link_uplink_mbps = round(cloud.target.link.uplink_bps.value / 1e6, 3)
    battery = device.battery_fraction
    rec.decision_battery = None if battery is None else round(battery, 4)
    m = state.metrics
    m.temp_c.set(reading.temp_c)
    if rec.predicted_local_s is not None:
        m.predicted.labels("local").set(rec.predicted_local_s)
    if rec.predicted_cloud_s is not None:
        m.predicted.labels("cloud").set(rec.predicted_cloud_s)
    return decision


async def forward(state: GatewayState, request: web.Request, req: ChatRequest,
                  out: Outgoing, decision: Decision, job: Job,
                  key: tuple[str, np.ndarray, Question] | None) -> web.StreamResponse:
    """Try the plan's targets in order until one answers; record the outcome. A target with
    models of its own gets its model's id in the body; one without keeps the model the body
    names (the client's, or the last target's)."""
    rec, m = job.rec, state.metrics
    size = SMALL if decision.model is not None else None
    failures: list[str] = []
    model_now = req.model
    for target in plan(state, decision):
        model = target.model_for(size, req.model)
        if model is not None:
            model_now = model
        rec.model = model_now
        rec.attempts.append(target.label)
        masked = state.config.mask_cloud and target.place is Place.CLOUD
        out_body = out.body_for(model_now, masked)
        placeholders = out.placeholders if masked and out.placeholders else None
        queue_seen = target.queue_len
        extra = {"X-Edgeserve-Placement": target.label,
                 "X-Edgeserve-Decision-Reason": decision.reason}
        target.inflight += 1
        m.inflight.labels(target.label).set(target.inflight)
        t0 = time.monotonic()
        try:
            assert state.session is not None
            res = await call(state.session, target, out_body, req.stream, request, extra,
                             placeholders)
        finally:
            target.inflight -= 1
            m.inflight.labels(target.label).set(target.inflight)
        if isinstance(res, Failure):
            failures.append(res.detail)
            m.fallbacks.labels(target.label, res.kind.value).inc()
            if res.kind is not FailureKind.BUSY:
                target.mark_down()
            continue
        target.calls += 1
        _fill(rec, target, res)
        if rec.outcome is Outcome.OK:
            if key is not None and state.cache is not None and res.body and _no_pii(res):
                context, vector, question = key
                state.cache.store(context, vector, res.body, question)
            latency = res.finished_s - t0
            if target.place is Place.LOCAL:
                state.device.observe_local(target, job, latency, queue_seen)
            else:
                target.link.observe_call(len(out_body), res.headers_s - t0, latency)
        _record(state, rec)
        return res.response
    rec.placement, rec.outcome, rec.finished_s = "none", Outcome.FAILED, time.monotonic()
    rec.error = "no target could take the request: " + "; ".join(failures or ["no targets"])
    _record(state, rec)
    return error(503, rec.error, "service_unavailable", {"Retry-After": "1"})


def _fill(rec: RequestRecord, target: Target, res: Relayed) -> None:
    rec.placement = target.label
    rec.first_token_s = res.first_token_s
    rec.token_times_s = res.token_times_s
    rec.last_token_s = res.token_times_s[-1] if res.token_times_s else res.first_token_s
    rec.finished_s = res.finished_s
    rec.prompt_tokens, rec.output_tokens = res.prompt_tokens, res.output_tokens
    if res.error == CLIENT_LEFT:
        rec.outcome, rec.error = Outcome.ABORTED, res.error
    elif 400 <= res.status < 500:  # the target refused the request itself (a bad image, …)
        rec.outcome, rec.error = Outcome.REJECTED, res.error or f"HTTP {res.status}"
    elif res.error is not None or res.status != 200:
        rec.outcome, rec.error = Outcome.FAILED, res.error or f"HTTP {res.status}"


def cache_key(state: GatewayState, req: ChatRequest, text: str, vector: np.ndarray | None
              ) -> tuple[str, np.ndarray, Question] | None:
    """(context, embedding, question) of a request the cache may answer or keep: one with no
    personal data in its text (``request_text(req)``: a masked text would match another person's
    question). Streamed or not is no part of it: an answer kept from either serves both."""
    if state.cache is None or vector is None:
        return None
    if mask(text) != text:
        return None
    context = context_key(req.model or "", str(req.output_limit), *image_urls(req))
    return context, vector, Question.of(text)


def _no_pii(res: Relayed) -> bool:
    return res.content is not None and mask(res.content) == res.content


async def _answer_from_cache(state: GatewayState, request: web.Request, req: ChatRequest,
                             rec: RequestRecord, hit: Hit) -> web.StreamResponse:
    """The kept answer: its body, or for ``stream: true`` the same answer as SSE chunks."""
    rec.placement = "cache"
    rec.decision_reason = f"semantic cache hit (similarity {hit.similarity:.3f})"
    headers = {"X-Edgeserve-Placement": "cache",
               "X-Edgeserve-Decision-Reason": rec.decision_reason}
    resp: web.StreamResponse
    if req.stream:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache", **headers})
        try:
            await resp.prepare(request)
            await resp.write(completion_events(hit.body, req.include_usage))
            await resp.write_eof()
        except ConnectionResetError:
            rec.outcome, rec.error = Outcome.ABORTED, CLIENT_LEFT
    else:
        resp = web.Response(body=hit.body, headers={"Content-Type": "application/json", **headers})
    rec.finished_s = rec.first_token_s = time.monotonic()
    _record(state, rec)
    return resp


def _finite(x: float) -> float | None:
    return x if x != float("inf") else None


def _finish_drop(state: GatewayState, rec: RequestRecord, reason: str) -> web.Response:
    rec.placement, rec.outcome = "drop", Outcome.DROPPED
    rec.error, rec.finished_s = reason, time.monotonic()
    _record(state, rec)
    return error(503, f"dropped by policy {state.policy_name}: {reason}", "request_dropped",
                 {"X-Edgeserve-Placement": "drop"})


def _record(state: GatewayState, rec: RequestRecord) -> None:
    state.write(rec)
    placement = rec.placement or "none"
    state.metrics.requests.labels(placement, rec.outcome.value).inc()
    if rec.finished_s is not None:
        state.metrics.e2e_seconds.labels(placement).observe(rec.finished_s - rec.arrived_s)
