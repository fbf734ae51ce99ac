"""The body a target receives: the client's bytes unless that target needs another model or a
smaller image."""

from __future__ import annotations

import base64
import io
import json

from conftest import chat_body, png_data_url
from PIL import Image

from edgeserve.gateway.outgoing import Outgoing


def _body(**extra: object) -> bytes:
    return json.dumps(chat_body("describe", png_data_url(64, 48), logprobs=False,
                                **extra)).encode()


def test_an_unchanged_request_is_forwarded_as_the_client_sent_it() -> None:
    body = _body(model="m")
    out = Outgoing(body, "m")
    assert out.body_for("m") is body


def test_another_model_is_written_into_a_copy_once() -> None:
    body = _body(model="m")
    out = Outgoing(body, "m")
    small = out.body_for("small-model")
    doc = json.loads(small)
    assert doc["model"] == "small-model" and doc["logprobs"] is False  # unknown fields kept
    assert doc["messages"] == json.loads(body)["messages"]
    assert out.body_for("small-model") is small
    assert json.loads(body)["model"] == "m"  # the client's bytes untouched
    assert out.body_for("m") is body


def test_a_resolution_downgrade_resizes_the_image_for_every_target() -> None:
    body = _body()
    out = Outgoing(body, None, resolution_scale=0.5)
    for model in (None, "big"):
        doc = json.loads(out.body_for(model))
        url = doc["messages"][0]["content"][1]["image_url"]["url"]
        data = base64.b64decode(url.partition(",")[2])
        assert Image.open(io.BytesIO(data)).size == (32, 24)
        assert doc.get("model") == model
