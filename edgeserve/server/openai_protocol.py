"""The OpenAI chat-completions request, parsed and validated, and the response shapes.

Parsing is strict about what it uses and lenient about what it ignores: fields of the OpenAI API
that this server does not implement (``logprobs``, ``tools``, …) are ignored, but a field it does
use with a wrong type or value is a :class:`BadRequest` whose message names the field, e.g.
``max_tokens: Expected `int`, got `str` - at `$.max_tokens```. Those become HTTP 400 replies.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec


class BadRequest(ValueError):
    """A malformed request; the message is returned to the client with HTTP 400."""


class ImageURL(msgspec.Struct):
    url: str
    detail: str | None = None


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class ImagePart(msgspec.Struct, tag="image_url", tag_field="type"):
    image_url: ImageURL | str


Part = TextPart | ImagePart


class Message(msgspec.Struct):
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[Part] | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ChatRequest(msgspec.Struct):
    messages: list[Message]
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    user: str | None = None

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


_decoder = msgspec.json.Decoder(ChatRequest)


def parse_chat_request(body: bytes, max_images: int) -> ChatRequest:
    """Decode and validate a request body; raises :class:`BadRequest`."""
    if not body:
        raise BadRequest("the request body is empty; expected a JSON chat-completions request")
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as e:
        raise BadRequest(f"invalid request: {e}") from None
    except msgspec.DecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from None
    if not req.messages:
        raise BadRequest("messages must hold at least one message")
    limit = req.output_limit
    if limit is not None and limit < 1:
        raise BadRequest(f"max_tokens must be >= 1, got {limit}")
    if req.temperature is not None and not 0.0 <= req.temperature <= 2.0:
        raise BadRequest(f"temperature must be in [0, 2], got {req.temperature}")
    if req.top_p is not None and not 0.0 < req.top_p <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {req.top_p}")
    if req.n != 1:
        raise BadRequest("only n=1 is supported")
    if req.min_tokens < 0:
        raise BadRequest("min_tokens must be >= 0")
    n_images = sum(
        1 for m in req.messages if isinstance(m.content, list)
        for p in m.content if isinstance(p, ImagePart)
    )
    if n_images > max_images:
        raise BadRequest(f"at most {max_images} images per request, got {n_images}")
    return req


def image_urls(req: ChatRequest) -> list[str]:
    """The request's image URLs in order of appearance."""
    urls = []
    for m in req.messages:
        if isinstance(m.content, list):
            for p in m.content:
                if isinstance(p, ImagePart):
                    urls.append(p.image_url.url if isinstance(p.image_url, ImageURL) else p.image_url)
    return urls


def template_messages(req: ChatRequest) -> list[dict[str, Any]]:
    """Messages in the form Qwen's chat template expects: images become ``{"type": "image"}``."""
    out: list[dict[str, Any]] = []
    for m in req.messages:
        role = "system" if m.role == "developer" else m.role
        if m.content is None or isinstance(m.content, str):
            out.append({"role": role, "content": m.content or ""})
            continue
        parts: list[dict[str, Any]] = []
        for p in m.content:
            if isinstance(p, ImagePart):
                parts.append({"type": "image"})
            else:
                parts.append({"type": "text", "text": p.text})
        out.append({"role": role, "content": parts})
    return out


# ---- responses ------------------------------------------------------------------------------
def error_body(message: str, type_: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    request_id: str, model: str, text: str, finish_reason: str | None,
    prompt_tokens: int, completion_tokens: int,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
        }],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk(
    request_id: str, model: str, created: int, delta: dict[str, Any],
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(
    request_id: str, model: str, created: int, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }
