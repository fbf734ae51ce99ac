"""An answer in both of its shapes: one ``chat.completion`` body, or a stream of server-sent events.

The semantic cache keeps answers as ``chat.completion`` bodies. A streamed request answered from
it gets what a streamed request answered by a server gets (the shapes of
:mod:`edgeserve.server.openai_protocol`): a first ``chat.completion.chunk`` with the role and
the text, one with the ``finish_reason``, a usage chunk when ``stream_options.include_usage``
asks for it, then ``data: [DONE]``. The other way, :class:`StreamAnswer` gathers a streamed
answer's chunks as they are relayed, so that a streamed miss is kept in the cache like a
non-streamed one. :class:`RestoringLines` puts a masked request's personal data back into the
chunks of its streamed answer.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from edgeserve.gateway.pii import Placeholders, StreamRestorer
from edgeserve.server import openai_protocol as proto

_json = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"


def _event(doc: dict[str, Any]) -> bytes:
    return b"data: " + _json.encode(doc) + b"\n\n"


def completion_events(body: bytes, include_usage: bool) -> bytes:
    """The SSE stream of a ``chat.completion`` body, whole (the answer is known)."""
    doc = msgspec.json.decode(body)
    choice = (doc.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") or ""
    rid, model = str(doc.get("id") or "chatcmpl-cache"), str(doc.get("model") or "")
    created = int(doc.get("created") or time.time())
    out = [_event(proto.chunk(rid, model, created, {"role": "assistant", "content": text})),
           _event(proto.chunk(rid, model, created, {}, choice.get("finish_reason") or "stop"))]
    usage = doc.get("usage")
    if include_usage and isinstance(usage, dict):
        out.append(_event(proto.usage_chunk(rid, model, created,
                                            int(usage.get("prompt_tokens") or 0),
                                            int(usage.get("completion_tokens") or 0))))
    out.append(DONE)
    return b"".join(out)


class StreamAnswer:
    """A streamed answer's text and metadata, gathered chunk by chunk."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.finish_reason: str | None = None
        self.done = False  # ``data: [DONE]`` arrived

    def add(self, chunk: dict[str, Any]) -> None:
        self.id = self.id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        self.created = self.created or chunk.get("created")
        for ch in chunk.get("choices") or []:
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            text = (ch.get("delta") or {}).get("content")
            if isinstance(text, str):
                self.pieces.append(text)
            if ch.get("finish_reason"):
                self.finish_reason = ch["finish_reason"]

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def body(self, prompt_tokens: int, output_tokens: int) -> bytes:
        """The ``chat.completion`` body a non-streamed request would have got."""
        doc = proto.completion(self.id or "chatcmpl-stream", self.model or "", self.text,
                               self.finish_reason or "stop", prompt_tokens, output_tokens)
        if self.created:
            doc["created"] = self.created
        return _json.encode(doc)


class RestoringLines:
    """The lines of a streamed answer to a masked request, its placeholders put back. A
    placeholder split across chunks is held back and comes out whole in a later chunk: at the
    latest in the one with the ``finish_reason``, or in a chunk of its own before ``[DONE]``."""

    def __init__(self, placeholders: Placeholders) -> None:
        self.restorer = StreamRestorer(placeholders)
        self.last: dict[str, Any] = {}  # the latest chunk's id, model and created

    def line(self, line: bytes) -> bytes:
        text = line.strip()
        if text == b"data: [DONE]":
            rest = self.restorer.flush()
            if not rest:
                return line
            chunk = proto.chunk(str(self.last.get("id") or ""), str(self.last.get("model") or ""),
                                int(self.last.get("created") or time.time()), {"content": rest})
            return _event(chunk) + line
        if not text.startswith(b"data:"):
            return line
        try:
            doc = msgspec.json.decode(text[5:])
        except msgspec.DecodeError:
            return line
        if not isinstance(doc, dict):
            return line
        self.last = doc
        for ch in doc.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            delta = ch.get("delta")
            if not isinstance(delta, dict):
                delta = ch["delta"] = {}
            piece = delta.get("content")
            if isinstance(piece, str):
                delta["content"] = self.restorer.feed(piece)
            if ch.get("finish_reason"):
                tail = self.restorer.flush()
                if tail:
                    delta["content"] = (delta.get("content") or "") + tail
        return b"data: " + _json.encode(doc) + b"\n"
