"""image_url resolution: data: URLs always, local files only inside --allowed-media-dir, http(s)
only when enabled — each refusal a clear 400 message."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from edgeserve.preproc_pool.messages import SourceKind
from edgeserve.server.media import MediaPolicy, load_image
from edgeserve.server.openai_protocol import BadRequest


def policy(media_dir: Path | None = None, allow_http: bool = False) -> MediaPolicy:
    return MediaPolicy(str(media_dir) if media_dir else None, allow_http, 1.0, 1000)


async def test_data_url_payload_goes_to_the_worker_still_encoded() -> None:
    payload = base64.b64encode(b"\x89PNG fake").decode()
    img = await load_image(f"data:image/png;base64,{payload}", policy())
    assert img.source is SourceKind.SHM_BASE64 and img.data == payload.encode()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:image/png,abc", "base64"),
        ("data:text/plain;base64,aGVsbG8=", "media type 'text/plain'"),
        ("data:image/png;base64,", "no image data"),
        ("data:image/png;base64," + "A" * 2000, "more than the limit of 1000"),
        ("ftp://example.com/x.png", "unsupported image URL"),
        ("https://example.com/x.png", "--allow-http-media"),
        ("file:///etc/passwd", "--allowed-media-dir"),
    ],
)
async def test_refusals_say_why(url: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        await load_image(url, policy())


async def test_files_inside_the_allowed_dir_are_read_by_the_worker(tmp_path: Path) -> None:
    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8\xff" + b"0" * 10)
    img = await load_image(f"file://{tmp_path}/cat.jpg", policy(tmp_path))
    assert img.source is SourceKind.FILE and img.path == str(tmp_path / "cat.jpg")
    assert img.data is None  # no bytes pass through the frontend


async def test_paths_escaping_the_allowed_dir_are_refused(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"x")
    os.symlink(secret, media / "link.jpg")
    for url in (f"file://{media}/../secret.jpg", f"file://{media}/link.jpg"):
        with pytest.raises(BadRequest, match="outside the allowed media directory"):
            await load_image(url, policy(media))
    with pytest.raises(BadRequest, match="not a file"):
        await load_image(f"file://{media}/missing.jpg", policy(media))


async def test_oversized_files_are_refused_before_reading(tmp_path: Path) -> None:
    (tmp_path / "big.jpg").write_bytes(b"0" * 1001)
    with pytest.raises(BadRequest, match="more than the limit"):
        await load_image(f"file://{tmp_path}/big.jpg", policy(tmp_path))


@pytest.fixture
async def http_images() -> AsyncIterator[str]:
    """A local HTTP server: /small (100 bytes), /big (2000 bytes), /slow (never answers in time)."""
    async def small(_: web.Request) -> web.Response:
        return web.Response(body=b"s" * 100)

    async def big(_: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # no Content-Length: the limit must hold while streaming
        await resp.prepare(_)
        for _i in range(20):
            await resp.write(b"b" * 100)
        return resp

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(body=b"late")

    app = web.Application()
    app.router.add_get("/small", small)
    app.router.add_get("/big", big)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_http_images_are_fetched_within_size_and_time_limits(http_images: str) -> None:
    allowed = policy(allow_http=True)
    img = await load_image(f"{http_images}/small", allowed)
    assert img.source is SourceKind.SHM and img.data == b"s" * 100
    with pytest.raises(BadRequest, match="more than 1000 bytes"):
        await load_image(f"{http_images}/big", allowed)
    with pytest.raises(BadRequest, match=r"longer than 1\.0 s"):
        await load_image(f"{http_images}/slow", allowed)
    with pytest.raises(BadRequest, match="HTTP 404"):
        await load_image(f"{http_images}/missing", allowed)
