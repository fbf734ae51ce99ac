"""Turning an ``image_url`` into image bytes a worker can read, with the server's safety rules.

Three kinds of URL are understood:

* ``data:image/…;base64,…`` — always allowed. The frontend does not even decode the base64: the
  text goes to the worker's shared-memory segment and the worker decodes it.
* ``file:///abs/path`` — only when the server was started with ``--allowed-media-dir DIR`` and
  only for regular files whose real path (symlinks resolved) lies inside ``DIR``. The worker
  reads the file itself; no bytes pass through the frontend.
* ``http://`` / ``https://`` — only with ``--allow-http-media``; fetched by the frontend with a
  time limit and a size limit.

Anything else is a :class:`~edgeserve.server.openai_protocol.BadRequest` (HTTP 400) that says
what was wrong and how to enable it where that is possible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from edgeserve.preproc_pool.messages import SourceKind
from edgeserve.preproc_pool.pool import ImageInput
from edgeserve.server.openai_protocol import BadRequest


@dataclass(slots=True, frozen=True)
class MediaPolicy:
    allowed_media_dir: str | None
    allow_http: bool
    http_timeout_s: float
    max_image_bytes: int


def _short(url: str) -> str:
    return url if len(url) <= 60 else url[:57] + "..."


def check_data_url(url: str, policy: MediaPolicy) -> int:
    """Where a ``data:`` URL's base64 payload starts, once its header and size pass the checks
    below (raises :class:`BadRequest`); the payload itself is not copied."""
    cut = url.find(",")
    if cut < 0:
        raise BadRequest("malformed data: URL: no ',' between header and payload")
    meta = url[len("data:"):cut].split(";")
    mime = meta[0].strip().lower()
    if "base64" not in [m.strip().lower() for m in meta[1:]]:
        raise BadRequest("data: URLs must be base64-encoded (data:image/png;base64,...)")
    if mime and not (mime.startswith("image/") or mime == "application/octet-stream"):
        raise BadRequest(f"data: URL has media type {mime!r}; expected an image/* type")
    payload_chars = len(url) - cut - 1
    if not payload_chars:
        raise BadRequest("the data: URL holds no image data")
    approx_bytes = payload_chars * 3 // 4
    if approx_bytes > policy.max_image_bytes:
        raise BadRequest(
            f"image is about {approx_bytes} bytes, more than the limit of {policy.max_image_bytes}"
        )
    return cut + 1


def load_data_url(url: str, policy: MediaPolicy) -> ImageInput:
    start = check_data_url(url, policy)
    return ImageInput(SourceKind.SHM_BASE64, data=url[start:].encode("ascii", errors="replace"))


def load_file_url(url: str, policy: MediaPolicy) -> ImageInput:
    if policy.allowed_media_dir is None:
        raise BadRequest(
            "local file image URLs are disabled; start the server with --allowed-media-dir DIR"
        )
    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise BadRequest(f"file URLs must name a local path, got host {parsed.netloc!r}")
    path = unquote(parsed.path)
    real = os.path.realpath(path)
    root = os.path.realpath(policy.allowed_media_dir)
    if os.path.commonpath([real, root]) != root:
        raise BadRequest(f"{path!r} is outside the allowed media directory")
    if not os.path.isfile(real):
        raise BadRequest(f"{path!r} is not a file in the allowed media directory")
    size = os.path.getsize(real)
    if size > policy.max_image_bytes:
        raise BadRequest(f"image is {size} bytes, more than the limit of {policy.max_image_bytes}")
    return ImageInput(SourceKind.FILE, path=real)


async def load_http_url(url: str, policy: MediaPolicy) -> ImageInput:
    if not policy.allow_http:
        raise BadRequest(
            "http(s) image URLs are disabled; start the server with --allow-http-media, "
            "or send the image as a data: URL"
        )
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=policy.http_timeout_s)
    limit = policy.max_image_bytes
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            if resp.status != 200:
                raise BadRequest(f"fetching {_short(url)} gave HTTP {resp.status}")
            if resp.content_length is not None and resp.content_length > limit:
                raise BadRequest(f"image at {_short(url)} is {resp.content_length} bytes, "
                                 f"more than the limit of {limit}")
            data = bytearray()
            async for block in resp.content.iter_chunked(1 << 16):
                data += block
                if len(data) > limit:
                    raise BadRequest(f"image at {_short(url)} is more than {limit} bytes")
    except TimeoutError:
        raise BadRequest(
            f"fetching {_short(url)} took longer than {policy.http_timeout_s} s"
        ) from None
    except aiohttp.ClientError as e:
        raise BadRequest(f"cannot fetch {_short(url)}: {e}") from None
    return ImageInput(SourceKind.SHM, data=bytes(data))


async def load_image(url: str, policy: MediaPolicy) -> ImageInput:
    """Resolve one ``image_url`` under the policy; raises :class:`BadRequest`."""
    scheme = url[: url.find(":")].lower() if ":" in url else ""
    if scheme == "data":
        return load_data_url(url, policy)
    if scheme == "file":
        return load_file_url(url, policy)
    if scheme in ("http", "https"):
        return await load_http_url(url, policy)
    raise BadRequest(
        f"unsupported image URL {_short(url)!r}: use a data: URL, a file:// URL inside "
        "--allowed-media-dir, or http(s) with --allow-http-media"
    )
