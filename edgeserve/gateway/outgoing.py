"""The body a target receives: the client's bytes as they came, unless that target needs a change.

Most requests pass through unchanged, and then the client's body is forwarded as it is: not
parsed again, not re-encoded, its image bytes not copied. Only a resolution downgrade (each
``data:`` image resized), a model the target names for itself, or masked text (``--mask-cloud``:
personal data behind numbered placeholders for a cloud target, :class:`~.pii.Placeholders`)
makes a new body; the client's JSON is then decoded once into plain values (so fields the gateway
does not read still reach the target) and each variant is encoded once, however many targets are
tried.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edgeserve.gateway.downgrade import downscale_images
from edgeserve.gateway.pii import Placeholders


class Outgoing:
    def __init__(self, body: bytes, model: str | None, resolution_scale: float = 1.0) -> None:
        self.body = body
        self.model = model  # what the client's body asks for
        self._doc: dict[str, Any] | None = None
        self._encoded: dict[tuple[str | None, bool], bytes] = {}
        self.placeholders = Placeholders()  # filled by the first masked body
        self._masked: list[Any] | None = None
        self._masked_done = False
        self.changed = resolution_scale < 1.0
        if self.changed:
            downscale_images(self.doc, resolution_scale)

    @property
    def doc(self) -> dict[str, Any]:
        """The client's JSON as plain values (decoded on first use; it has been validated)."""
        if self._doc is None:
            self._doc = msgspec.json.decode(self.body)
        return self._doc

    def body_for(self, model: str | None, masked: bool = False) -> bytes:
        """The body naming ``model``, its text masked if ``masked`` (the client's own body when
        nothing changes; a masked body of a request without personal data is that body too)."""
        if masked and self._masked_messages() is None:
            masked = False
        if model == self.model and not self.changed and not masked:
            return self.body
        out = self._encoded.get((model, masked))
        if out is None:
            doc = self.doc
            if masked:
                doc = {**doc, "messages": self._masked_messages()}
            if model is not None:
                doc["model"] = model
            out = self._encoded[(model, masked)] = msgspec.json.encode(doc)
        return out

    def _masked_messages(self) -> list[Any] | None:
        """The messages with every text masked, or None when no text holds personal data."""
        if not self._masked_done:
            self._masked_done = True
            ph, changed, out = self.placeholders, False, []
            for m in self.doc.get("messages") or []:
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, str):
                    masked = ph.mask(content)
                    changed |= masked != content
                    m = {**m, "content": masked}
                elif isinstance(content, list):
                    parts = []
                    for part in content:
                        if isinstance(part, dict) and isinstance(part.get("text"), str):
                            masked = ph.mask(part["text"])
                            changed |= masked != part["text"]
                            part = {**part, "text": masked}
                        parts.append(part)
                    m = {**m, "content": parts}
                out.append(m)
            self._masked = out if changed else None
        return self._masked
