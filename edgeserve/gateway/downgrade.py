"""A policy's resolution downgrade, done: each ``data:`` image resized by ``scale`` with Pillow.

The image is re-encoded in its own format (JPEG at quality 90, PNG otherwise) so that fewer
pixels also mean fewer bytes on the link and fewer image tokens. Images given as http(s) URLs are
forwarded as they are: the gateway does not fetch them.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image

from edgeserve.gateway.live_job import data_url_bytes


def resize_data_url(url: str, scale: float) -> str:
    data = data_url_bytes(url)
    if data is None:
        return url
    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format or "PNG"
        w, h = max(1, round(im.width * scale)), max(1, round(im.height * scale))
        small = im.convert("RGB") if fmt == "JPEG" else im.copy()
        small = small.resize((w, h), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    if fmt == "JPEG":
        small.save(buf, "JPEG", quality=90)
        mime = "image/jpeg"
    else:
        small.save(buf, "PNG")
        mime = "image/png"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def downscale_images(body: dict[str, Any], scale: float) -> int:
    """Resize every data-URL image of a request body (the client's JSON, kept whole so that
    fields the gateway does not read still reach the target) by ``scale``; returns how many."""
    n = 0
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            iu = part.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu
            if isinstance(url, str) and url.startswith("data:"):
                part["image_url"] = {"url": resize_data_url(url, scale)}
                n += 1
    return n
