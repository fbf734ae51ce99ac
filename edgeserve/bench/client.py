"""One streaming chat-completion request, timed from the client's side.

The client posts a prepared body to ``/v1/chat/completions`` with ``stream: true`` and reads the
server-sent events (``data: {...}`` lines, ending with ``data: [DONE]``). From the arrival times
of the chunks it measures, as ``vllm bench serve`` does:

* **TTFT** (time to first token): send → first chunk that carries generated text. A chunk with an
  empty delta (vLLM's role chunk, or a keep-alive a server sends before its first token) does not
  count, so a server cannot look fast by answering before it has a token. If no chunk ever carries
  text (a model that emits only unprintable tokens), the first choice chunk counts instead.
* **ITL** (inter-token latency): gaps between successive text chunks after the first.
* **E2E** latency: send → last text chunk.
* **TPOT** (time per output token): ``(E2E − TTFT) / (output tokens − 1)``, with the token count
  from the final ``usage`` chunk (``stream_options.include_usage``).

Clock: :func:`time.perf_counter`. All times are seconds.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field

import aiohttp


@dataclass(slots=True)
class RequestResult:
    """What the client saw of one request."""

    index: int
    ok: bool = False
    error: str = ""
    http_status: int = 0
    error_code: int = 0  # the status an error carried: the HTTP status, or an in-stream error's code
    retry_after_s: float | None = None  # the Retry-After header of a refusal
    stream_done: bool = False  # the stream ended with ``data: [DONE]`` (not cut off)
    start_s: float = 0.0  # perf_counter at send, for timelines
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int = 0
    image_bytes: int = 0
    image_pixels: int = 0
    text: str = ""

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def _delta_text(choice: dict[str, object]) -> str:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    text = ""
    for key in ("content", "reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str):
            text += value
    return text


async def send_chat(
    session: aiohttp.ClientSession, url: str, body: bytes, result: RequestResult
) -> RequestResult:
    """POST ``body`` to ``url`` (a full ``…/v1/chat/completions`` URL), filling ``result``."""
    first_choice_s: float | None = None
    first_text_s: float | None = None
    last_text_s: float | None = None
    token_times: list[float] = []
    pieces: list[str] = []
    usage_tokens: int | None = None
    start = time.perf_counter()
    result.start_s = start
    try:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            result.http_status = resp.status
            if resp.status != 200:
                detail = (await resp.text())[:300]
                result.error = f"HTTP {resp.status}: {detail}"
                result.error_code = resp.status
                retry_after = resp.headers.get("Retry-After", "")
                if retry_after.replace(".", "", 1).isdigit():
                    result.retry_after_s = float(retry_after)
                return result
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                now = time.perf_counter()
                for raw in lines:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # SSE comments (": ping"), event names, blank separators
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        result.stream_done = True
                        continue
                    data = json.loads(payload)
                    if "error" in data and not data.get("choices"):
                        result.error = f"stream error: {str(data['error'])[:300]}"
                        code = data["error"].get("code") if isinstance(data["error"], dict) else None
                        result.error_code = int(code) if isinstance(code, int) else 0
                        return result
                    choices = data.get("choices") or []
                    if choices:
                        if first_choice_s is None:
                            first_choice_s = now
                        text = _delta_text(choices[0])
                        if text:
                            pieces.append(text)
                            token_times.append(now)
                            first_text_s = first_text_s if first_text_s is not None else now
                            last_text_s = now
                    usage = data.get("usage")
                    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                        usage_tokens = int(usage["completion_tokens"])
                        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, ValueError) as e:
        result.error = f"{type(e).__name__}: {e}"[:300]
        return result
    if first_text_s is None:
        if first_choice_s is None:
            result.error = "the stream ended without a token"
            return result
        first_text_s = last_text_s = first_choice_s
        token_times = [first_choice_s]
    assert last_text_s is not None
    result.ok = True
    result.ttft_s = first_text_s - start
    result.e2e_s = last_text_s - start
    result.itl_s = [b - a for a, b in itertools.pairwise(token_times)]
    result.output_tokens = usage_tokens if usage_tokens is not None else len(token_times)
    result.text = "".join(pieces)
    return result
