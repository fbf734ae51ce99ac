"""The body a target receives: the client's bytes as they came, unless that target needs a change.

Most requests pass through unchanged, and then the client's body is forwarded as it is: not
parsed again, not re-encoded, its image bytes not copied. Only a resolution downgrade (each
``data:`` image resized) or a model the target names for itself makes a new body; the client's
JSON is then decoded once into plain values (so fields the gateway does not read still reach the
target) and each variant is encoded once, however many targets are tried.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edgeserve.gateway.downgrade import downscale_images


class Outgoing:
    def __init__(self, body: bytes, model: str | None, resolution_scale: float = 1.0) -> None:
        self.body = body
        self.model = model  # what the client's body asks for
        self._doc: dict[str, Any] | None = None
        self._encoded: dict[str | None, bytes] = {}
        self.changed = resolution_scale < 1.0
        if self.changed:
            downscale_images(self.doc, resolution_scale)

    @property
    def doc(self) -> dict[str, Any]:
        """The client's JSON as plain values (decoded on first use; it has been validated)."""
        if self._doc is None:
            self._doc = msgspec.json.decode(self.body)
        return self._doc

    def body_for(self, model: str | None) -> bytes:
        """The body naming ``model`` (the client's own body when nothing changes)."""
        if model == self.model and not self.changed:
            return self.body
        out = self._encoded.get(model)
        if out is None:
            doc = self.doc
            if model is not None:
                doc["model"] = model
            out = self._encoded[model] = msgspec.json.encode(doc)
        return out
