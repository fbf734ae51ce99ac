"""``POST /v1/chat/completions``: one request's walk through the pipeline, and its record.

    parse ─▶ admit ─▶ load image_url ─▶ preprocess (worker) ─▶ prompt ─▶ engine ─▶ respond

Every step stamps the request's :class:`~edgeserve.records.RequestRecord`; whatever happens —
success, a 400, a 429, a dead worker, a client that hangs up — the record is finished with an
:class:`~edgeserve.records.Outcome` and emitted exactly once. Status codes:

* 400: malformed request or an image that cannot be used (the message says why);
* 404: a ``model`` other than the served one;
* 429 + ``Retry-After``: admission limits reached (``--max-inflight``, ``--max-pending``);
* 500: the workers of both attempts at an image died (one death is retried unseen by the
  client), the vision encoder failed or gave embeddings of the wrong shape, or the
  engine failed (with the reason);
* 503 + ``Retry-After``: the server is draining for shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from edgeserve.encoder import embeds_shape_error
from edgeserve.preproc_pool.messages import ErrorKind
from edgeserve.preproc_pool.pool import PoolFull, Preprocessed, PreprocFailed
from edgeserve.records import Outcome, RequestRecord
from edgeserve.server import openai_protocol as proto
from edgeserve.server.context import ServerContext
from edgeserve.server.media import load_image

_json = msgspec.json.Encoder()


class HTTPFailure(Exception):
    """Ends a request with an HTTP error and a record outcome."""

    def __init__(self, status: int, message: str, outcome: Outcome, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.outcome, self.retry_after = status, outcome, retry_after


def _error_response(e: HTTPFailure) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError",
            503: "ServiceUnavailableError"}.get(e.status, "InternalServerError")
    headers = {"Retry-After": str(e.retry_after)} if e.retry_after is not None else None
    return web.Response(status=e.status, body=_json.encode(proto.error_body(str(e), kind, e.status)),
                        content_type="application/json", headers=headers)


async def handle_chat(ctx: ServerContext, request: web.Request) -> web.StreamResponse:
    rec = RequestRecord(id=f"chatcmpl-{uuid.uuid4().hex}", arrived_s=time.monotonic(),
                        device=ctx.host)
    task = asyncio.current_task()
    if task is not None:
        ctx.handler_tasks.add(task)
    try:
        return await _serve(ctx, request, rec)
    except HTTPFailure as e:
        rec.outcome, rec.error = e.outcome, str(e)
        return _error_response(e)
    except asyncio.CancelledError:
        rec.outcome = Outcome.ABORTED
        rec.error = ("cancelled: the server's drain timeout ran out" if ctx.draining
                     else "client disconnected")
        raise
    finally:
        rec.finished_s = time.monotonic()
        ctx.recorder.request(rec)
        if task is not None:
            ctx.handler_tasks.discard(task)


async def _serve(ctx: ServerContext, request: web.Request, rec: RequestRecord) -> web.StreamResponse:
    cfg = ctx.config
    if ctx.draining:
        raise HTTPFailure(503, "server is shutting down", Outcome.REJECTED, cfg.retry_after_s)
    _refuse_while_restarting(ctx)
    try:
        req = proto.parse_chat_request(await request.read(), cfg.max_images_per_request)
    except proto.BadRequest as e:
        raise HTTPFailure(400, str(e), Outcome.REJECTED) from None
    if req.model is not None and req.model not in (cfg.model_name, cfg.model):
        raise HTTPFailure(404, f"model {req.model!r} is not served here; this server serves "
                               f"{cfg.model_name!r}", Outcome.REJECTED)
    urls = proto.image_urls(req)
    if (ctx.inflight >= cfg.max_inflight or ctx.admission.full()
            or (urls and not ctx.preproc.has_room())):
        raise HTTPFailure(429, "server is at capacity; retry later", Outcome.REJECTED,
                          cfg.retry_after_s)
    rec.max_tokens = req.output_limit or 0
    ctx.inflight += 1
    if urls:  # waiting for an engine slot counts as waiting for preprocessing
        rec.preproc_queued_s = time.monotonic()
    try:
        async with ctx.admission.slot() as release_slot:
            images = await _preprocess(ctx, urls, rec) if urls else []
            _refuse_while_restarting(ctx)  # the engine may have died meanwhile
            ctx.engine_waiters += 1
            try:
                return await _generate(ctx, request, req, rec, images, release_slot)
            finally:
                ctx.engine_waiters -= 1
    finally:
        ctx.inflight -= 1


def _refuse_while_restarting(ctx: ServerContext) -> None:
    if ctx.engine_restarting or ctx.engine.errored:
        raise HTTPFailure(503, "the inference engine is restarting after its process ended; "
                          "retry later", Outcome.REJECTED, ctx.config.retry_after_s)


async def _preprocess(ctx: ServerContext, urls: list[str], rec: RequestRecord) -> list[Preprocessed]:
    try:
        inputs = [await load_image(u, ctx.media) for u in urls]
    except proto.BadRequest as e:
        raise HTTPFailure(400, str(e), Outcome.REJECTED) from None
    rec.num_images = len(inputs)
    rec.image_bytes = sum(i.size_bytes for i in inputs)
    now = time.monotonic()
    if rec.preproc_queued_s is None:
        rec.preproc_queued_s = now
    ctx.meter.cpu_enter(now)
    try:
        results = await asyncio.gather(*(ctx.preproc.submit(i) for i in inputs),
                                       return_exceptions=True)
    finally:
        rec.preproc_end_s = time.monotonic()
        ctx.meter.cpu_exit(rec.preproc_end_s)
    rec.preproc_retries = sum(r.retries for r in results
                              if isinstance(r, Preprocessed | PreprocFailed))
    for r in results:
        if isinstance(r, PoolFull):
            raise HTTPFailure(429, "preprocessing queue is full; retry later", Outcome.REJECTED,
                              ctx.config.retry_after_s)
        if isinstance(r, PreprocFailed):
            if r.kind is ErrorKind.BAD_IMAGE:
                raise HTTPFailure(400, f"invalid image: {r}", Outcome.FAILED)
            raise HTTPFailure(500, str(r), Outcome.FAILED)
        if isinstance(r, BaseException):
            raise r
    done: list[Preprocessed] = [r for r in results if isinstance(r, Preprocessed)]
    first = done[0].result
    rec.worker = done[0].worker if done[0].worker >= 0 else None
    rec.preproc_start_s = first.start_s
    rec.decode_end_s = first.decode_end_s
    rec.resize_end_s = first.resize_end_s
    rec.normalize_end_s = max(d.result.normalize_end_s for d in done)
    if first.grid_thw:  # the vision encoder ran after patchify
        rec.encode_end_s = max(d.result.encode_end_s for d in done)
    rec.source_width, rec.source_height = first.source_width, first.source_height
    rec.decoded_pixels = first.decoded_pixels
    rec.target_width, rec.target_height = first.target_width, first.target_height
    spec = ctx.config.preproc_spec  # one token per factor × factor pixels (28 or 32)
    rec.image_tokens = sum(spec.tokens(d.result.target_height, d.result.target_width)
                           for d in done)
    return done


async def _generate(ctx: ServerContext, request: web.Request, req: proto.ChatRequest,
                    rec: RequestRecord, images: list[Preprocessed],
                    release_slot: Callable[[], None]) -> web.StreamResponse:
    engine = ctx.engine
    messages = proto.template_messages(req)
    prompt = engine.build_prompt(messages)
    prefix = engine.prefix_of(messages)
    if prefix is not None:
        rec.prefix_id, rec.prefix_tokens = prefix
    stop = [req.stop] if isinstance(req.stop, str) else req.stop
    try:
        params = engine.sampling_params(
            max_tokens=req.output_limit, temperature=req.temperature, top_p=req.top_p,
            top_k=req.top_k, seed=req.seed, stop=stop, ignore_eos=req.ignore_eos,
            min_tokens=req.min_tokens)
    except ValueError as e:
        raise HTTPFailure(400, f"invalid sampling parameters: {e}", Outcome.REJECTED) from None
    grids = _checked_grids(ctx, images) if engine.takes_embeds else None
    rec.engine_queued_s = time.monotonic()
    gen = engine.generate(rec.id, prompt, [i.pixels for i in images],
                          [i.result.content_hash for i in images], params, grids)
    del images  # the arrays now belong to vLLM's input processing
    try:
        first = await _first_output(ctx, gen)
    except asyncio.CancelledError:
        await engine.abort(rec.id)
        raise
    release_slot()  # prefilled: its pixels are gone from the engine's queue
    rec.prompt_tokens = len(first.prompt_token_ids or [])
    rec.cached_tokens = first.num_cached_tokens or 0  # vLLM's prefix-cache hit
    if req.stream:
        return await _stream(ctx, request, req, rec, gen, first)
    return await _complete(ctx, req, rec, gen, first)


def _checked_grids(ctx: ServerContext, images: list[Preprocessed]) -> list[tuple[int, ...]]:
    """Each image's patch grid, once its embeddings are known to fit it — an array of another
    shape would give the engine a wrong number of image tokens, or crash it."""
    spec = ctx.preproc.params.encoder
    assert spec is not None
    for n, image in enumerate(images, start=1):
        why = embeds_shape_error(image.pixels.shape, image.result.grid_thw, spec.merge_size,
                                 spec.hidden_size)
        if why is not None:
            raise HTTPFailure(500, f"the vision encoder's output for image {n} does not fit the "
                                   f"model: {why}", Outcome.FAILED)
    return [image.result.grid_thw for image in images]


def _engine_failure(ctx: ServerContext, e: Exception) -> HTTPFailure:
    """An exception out of the engine: 503 when the engine itself died (the server starts a new
    one: :mod:`edgeserve.server.engine_restart`), else a 500."""
    if ctx.engine.errored or ctx.engine_restarting:
        return HTTPFailure(503, "the inference engine has died (its process ended); this request "
                           "is lost and a new engine is starting: retry later",
                           Outcome.FAILED, ctx.config.retry_after_s)
    return HTTPFailure(500, f"engine error: {type(e).__name__}: {e}", Outcome.FAILED)


async def _first_output(ctx: ServerContext, gen: Any) -> Any:
    from vllm.exceptions import VLLMValidationError

    try:
        return await gen.__anext__()
    except (VLLMValidationError, ValueError) as e:
        raise HTTPFailure(400, str(e), Outcome.REJECTED) from None
    except StopAsyncIteration:
        raise HTTPFailure(500, "the engine returned no output", Outcome.FAILED) from None
    except asyncio.CancelledError:
        raise
    except Exception as e:  # engine failures become a 500 (503 if the engine died) with the reason
        raise _engine_failure(ctx, e) from None


def _note_tokens(rec: RequestRecord, out: Any, now: float) -> tuple[str, str | None]:
    c = out.outputs[0]
    n = len(c.token_ids)
    if n:
        if rec.first_token_s is None:
            rec.first_token_s = now
        rec.token_times_s.extend([now] * n)
        rec.last_token_s = now
        rec.output_tokens += n
    return c.text, c.finish_reason


async def _complete(ctx: ServerContext, req: proto.ChatRequest, rec: RequestRecord, gen: Any,
                    first: Any) -> web.Response:
    parts: list[str] = []
    out, finish = first, None
    try:
        while True:
            text, finish = _note_tokens(rec, out, time.monotonic())
            parts.append(text)
            if out.finished:
                break
            out = await gen.__anext__()
    except asyncio.CancelledError:
        await ctx.engine.abort(rec.id)
        raise
    except StopAsyncIteration:
        pass
    except Exception as e:
        raise _engine_failure(ctx, e) from None
    body = proto.completion(rec.id, ctx.config.model_name, "".join(parts), finish,
                            rec.prompt_tokens, rec.output_tokens)
    return web.Response(body=_json.encode(body), content_type="application/json")


async def _stream(ctx: ServerContext, request: web.Request, req: proto.ChatRequest,
                  rec: RequestRecord, gen: Any, first: Any) -> web.StreamResponse:
    model, created = ctx.config.model_name, int(time.time())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    out = first
    try:
        await resp.prepare(request)
        role_sent = False
        while True:
            text, finish = _note_tokens(rec, out, time.monotonic())
            delta: dict[str, Any] = {"content": text}
            if not role_sent:
                delta = {"role": "assistant", "content": text}
                role_sent = True
            if text or finish is not None or len(out.outputs[0].token_ids):
                chunk = proto.chunk(rec.id, model, created, delta, finish)
                await resp.write(b"data: " + _json.encode(chunk) + b"\n\n")
            if out.finished:
                break
            try:
                out = await gen.__anext__()
            except StopAsyncIteration:
                break
        if req.include_usage:
            u = proto.usage_chunk(rec.id, model, created, rec.prompt_tokens, rec.output_tokens)
            await resp.write(b"data: " + _json.encode(u) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
    except asyncio.CancelledError:  # the client went away (aiohttp cancels the handler)
        await ctx.engine.abort(rec.id)
        raise
    except ConnectionResetError:  # the client went away while we wrote to it
        await ctx.engine.abort(rec.id)
        rec.outcome, rec.error = Outcome.ABORTED, "client disconnected"
        return resp
    except Exception as e:  # the status is already sent: report in-stream
        failure = _engine_failure(ctx, e)
        rec.outcome, rec.error = Outcome.FAILED, str(failure)
        err = proto.error_body(rec.error, "InternalServerError", failure.status)
        with contextlib.suppress(ConnectionResetError):
            await resp.write(b"data: " + _json.encode(err) + b"\n\n")
    return resp
