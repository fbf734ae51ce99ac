"""One call to one target: send the chat request, and either relay its answer or say why not.

Whether the gateway may still try another target depends on what the client has seen. Until the
upstream's status line arrives nothing has been sent to the client, so a refused connection, a
timeout, a 5xx or a 429 is a :class:`Failure` and the request moves on. A 4xx other than 429 is
the client's own error and is relayed as it is. Once a 200 arrives the answer is relayed (as one
JSON body, or chunk by chunk for ``stream: true``) and the call is committed.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

import aiohttp
import msgspec
from aiohttp import web

from edgeserve.gateway.pii import Placeholders
from edgeserve.gateway.sse import RestoringLines, StreamAnswer
from edgeserve.gateway.targets import Target

CLIENT_LEFT = "the client went away"


class FailureKind(enum.StrEnum):
    UNREACHABLE = "unreachable"  # refused, reset, DNS
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"  # 5xx
    BUSY = "busy"  # 429


@dataclass(slots=True)
class Failure:
    kind: FailureKind
    detail: str


@dataclass(slots=True)
class Relayed:
    """A committed call: what the client got and when."""

    status: int
    headers_s: float
    response: web.StreamResponse
    first_token_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    finished_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    body: bytes | None = None  # the answer as one chat.completion body (a stream's: gathered)
    content: str | None = None  # the answer's text (its first choice's message)


def _headers(target: Target) -> dict[str, str]:
    h = {"Content-Type": "application/json"}
    key = target.api_key
    if key:
        h["Authorization"] = f"Bearer {key}"
    return h


async def call(session: aiohttp.ClientSession, target: Target, body: bytes, stream: bool,
               request: web.Request, extra_headers: dict[str, str],
               placeholders: Placeholders | None = None) -> Failure | Relayed:
    """Send ``body``; relay the answer, with ``placeholders`` (the masked request's) put back
    into its text."""
    url = target.cfg.base_url + "/chat/completions"
    timeout = aiohttp.ClientTimeout(total=target.cfg.timeout_s)
    try:
        async with session.post(url, data=body, headers=_headers(target),
                                timeout=timeout) as resp:
            headers_s = time.monotonic()
            if resp.status == 429:
                return Failure(FailureKind.BUSY, f"{target.label} answered 429")
            if resp.status >= 500:
                return Failure(FailureKind.SERVER_ERROR,
                               f"{target.label} answered {resp.status}")
            if stream and resp.status == 200:
                return await _relay_stream(resp, request, headers_s, extra_headers, placeholders)
            return await _relay_body(resp, request, headers_s, extra_headers, placeholders)
    except TimeoutError:
        return Failure(FailureKind.TIMEOUT,
                       f"{target.label} gave no answer within {target.cfg.timeout_s} s")
    except aiohttp.ClientError as e:
        return Failure(FailureKind.UNREACHABLE, f"{target.label} unreachable: {e}")


async def _relay_body(resp: aiohttp.ClientResponse, request: web.Request, headers_s: float,
                      extra: dict[str, str], placeholders: Placeholders | None) -> Relayed:
    data = await resp.read()
    if placeholders and resp.status == 200:
        data = _restored_body(data, placeholders)
    web_resp = web.Response(body=data, status=resp.status, headers={
        "Content-Type": resp.headers.get("Content-Type", "application/json"), **extra})
    out = Relayed(resp.status, headers_s, web_resp, finished_s=time.monotonic(), body=data)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        doc = None
    if isinstance(doc, dict):
        out.content = _message_text(doc)
        usage = doc.get("usage") or {}
        out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        out.output_tokens = int(usage.get("completion_tokens") or 0)
        if resp.status != 200:
            err = doc.get("error")
            out.error = str(err.get("message") if isinstance(err, dict) else err)
    out.first_token_s = out.finished_s if resp.status == 200 else None
    return out


async def _relay_stream(resp: aiohttp.ClientResponse, request: web.Request, headers_s: float,
                        extra: dict[str, str], placeholders: Placeholders | None) -> Relayed:
    client = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                         "Cache-Control": "no-cache", **extra})
    out = Relayed(resp.status, headers_s, client)
    answer = StreamAnswer()
    restoring = RestoringLines(placeholders) if placeholders else None
    await client.prepare(request)
    try:
        async for line in resp.content:
            if restoring is not None:
                line = restoring.line(line)
            try:
                await client.write(line)
            except ConnectionResetError:
                out.error = CLIENT_LEFT
                break
            text = line.strip()
            if text == b"data: [DONE]":
                answer.done = True
                continue
            if not text.startswith(b"data:"):
                continue
            try:
                doc = msgspec.json.decode(text[5:])
            except msgspec.DecodeError:
                continue
            if not isinstance(doc, dict):
                continue
            answer.add(doc)
            now = time.monotonic()
            for ch in doc.get("choices") or []:
                if (ch.get("delta") or {}).get("content"):
                    if out.first_token_s is None:
                        out.first_token_s = now
                    out.token_times_s.append(now)
            usage = doc.get("usage")
            if usage:
                out.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                out.output_tokens = int(usage.get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as e:
        out.error = f"upstream stream broke: {e}"  # the client has its partial answer
    if out.error != CLIENT_LEFT:
        await client.write_eof()
    out.finished_s = time.monotonic()
    if not out.output_tokens:
        out.output_tokens = len(out.token_times_s)
    if answer.done and out.error is None:
        out.content = answer.text
        out.body = answer.body(out.prompt_tokens, out.output_tokens)
    return out


def _message_text(doc: dict[str, object]) -> str | None:
    try:
        text = doc["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


def _restored_body(data: bytes, placeholders: Placeholders) -> bytes:
    try:
        doc = msgspec.json.decode(data)
        for ch in doc["choices"]:
            msg = ch.get("message") or {}
            if isinstance(msg.get("content"), str):
                msg["content"] = placeholders.restore(msg["content"])
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return data
    return msgspec.json.encode(doc)

