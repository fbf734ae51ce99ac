"""A live request in the form a policy reads: a simulator :class:`~sim.core.job.Job`.

Policies look at ``job.rec`` (the shared :class:`~edgeserve.records.RequestRecord`: image bytes,
deadline) and the latency models at the job's sizes (source and target pixels, image and prompt
tokens, output tokens). The gateway reads the image sizes from each image's header (Pillow opens
lazily: no pixel is decoded; only the start of the base64 payload is decoded when the header lies
there), the target size by the model's ``smart_resize``, and estimates the
prompt's text tokens as characters / 4.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
from dataclasses import dataclass

from PIL import Image

from edgeserve.records import RequestRecord
from edgeserve.server.openai_protocol import ChatRequest, TextPart, image_urls
from mm_preproc.smart_resize import smart_resize
from sim.core.job import Job

PATCH_PIXELS = 28 * 28  # one image token: a 2×2 merge of 14-px patches
DEFAULT_OUTPUT_TOKENS = 64


@dataclass(slots=True, frozen=True)
class ImageSize:
    width: int
    height: int
    bytes_: int


def data_url_bytes(url: str) -> bytes | None:
    """The decoded payload of a base64 ``data:`` URL (None for other URLs)."""
    if not url.startswith("data:"):
        return None
    try:
        return base64.b64decode(url.partition(",")[2], validate=False)
    except (binascii.Error, ValueError):
        return None


# the first 4 KiB of an image (PNG, GIF, WebP and most JPEG headers lie there), then 128 KiB (a
# JPEG's EXIF block is at most 64 KiB): base64 characters, a multiple of 4
HEADER_B64_CHARS = (4 * 1366, 4 * 43691)


_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers
_JPEG_NO_LENGTH = frozenset([0x01, *range(0xD0, 0xDA)])  # TEM, RSTn, SOI, EOI: no length field


def _header_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG's IHDR or a JPEG's start-of-frame, read directly (what
    Pillow reads for them, without its plugin search); None for other formats or a header that
    ``data`` does not hold whole."""
    if data.startswith(_PNG) and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return int(w), int(h)
    if not data.startswith(b"\xff\xd8"):
        return None
    i, n = 2, len(data)
    while i < n:
        if data[i] != 0xFF:
            return None  # not at a marker: let Pillow judge
        while i < n and data[i] == 0xFF:
            i += 1  # fill bytes
        if i + 1 > n:
            return None
        marker = data[i]
        i += 1
        if marker in _JPEG_NO_LENGTH:
            continue
        if i + 2 > n:
            return None
        if marker in _JPEG_SOF:
            if i + 7 > n:
                return None
            h, w = struct.unpack(">HH", data[i + 3:i + 7])
            return int(w), int(h)
        i += struct.unpack(">H", data[i:i + 2])[0]
    return None


def _size_of(data: bytes) -> tuple[int, int] | None:
    fast = _header_size(data)
    if fast is not None:
        return fast
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.width, im.height
    except (OSError, SyntaxError, Image.DecompressionBombError, ValueError, EOFError):
        return None


def image_size(url: str) -> ImageSize:
    """An image's size from its header, decoding only the payload's first 4 KiB (or 128 KiB) where
    the header lies there, the whole image only when not; its byte count from the base64 length."""
    if not url.startswith("data:"):
        return ImageSize(0, 0, 0)
    start = url.find(",") + 1  # the payload, without copying it
    n = len(url) - start
    for chars in HEADER_B64_CHARS:
        if not start or n % 4 or n <= chars:
            break
        try:
            size = _size_of(base64.b64decode(url[start:start + chars], validate=False))
        except (binascii.Error, ValueError):
            break
        if size is not None:
            return ImageSize(size[0], size[1], n // 4 * 3 - url.count("=", len(url) - 2))
    data = data_url_bytes(url)
    if data is None:
        return ImageSize(0, 0, 0)
    size = _size_of(data) or (0, 0)
    return ImageSize(size[0], size[1], len(data))


def text_chars(req: ChatRequest) -> int:
    n = 0
    for m in req.messages:
        if isinstance(m.content, str):
            n += len(m.content)
        elif m.content:
            n += sum(len(p.text) for p in m.content if isinstance(p, TextPart))
    return n


def request_text(req: ChatRequest) -> str:
    """The request's text, one line per message (``role: text``): what the cache embeds."""
    lines = []
    for m in req.messages:
        if isinstance(m.content, str):
            lines.append(f"{m.role}: {m.content}")
        elif m.content:
            lines.append(f"{m.role}: " + " ".join(p.text for p in m.content
                                                   if isinstance(p, TextPart)))
    return "\n".join(lines)


def build_job(req: ChatRequest, rec: RequestRecord, device: object) -> Job:
    sizes = [image_size(u) for u in image_urls(req)]
    src = tgt = tokens = 0
    for s in sizes:
        src += s.width * s.height
        if s.width and s.height:
            h, w = smart_resize(s.height, s.width)
            tgt += h * w
            tokens += h * w // PATCH_PIXELS
    rec.num_images = len(sizes)
    rec.image_bytes = sum(s.bytes_ for s in sizes)
    if sizes:
        rec.source_width, rec.source_height = sizes[0].width, sizes[0].height
    rec.image_tokens = tokens
    out = req.output_limit or DEFAULT_OUTPUT_TOKENS
    rec.max_tokens = out
    prompt = tokens + text_chars(req) // 4 + 1
    return Job(rec, device, src, tgt, tokens, prompt, out)
