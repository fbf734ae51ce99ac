"""Personal data kept out of what the gateway writes: e-mail addresses, phone numbers, payment
card numbers, IBANs and IP addresses are replaced by ``<email>``, ``<phone>``, ``<card>``,
``<iban>`` and ``<ip>`` in every text field of a record before it reaches the trace. With
``--mask-cloud`` a request's text goes to a cloud target with numbered placeholders instead
(``<email_1>``, :class:`Placeholders`), which are put back into the answer, streamed or not.

Digits alone are ambiguous, so the checksums decide where they exist: a card number is 13–19
digits (spaces or dashes between groups allowed) that pass the Luhn check; an IBAN is a country
code, two check digits and 11–30 letters or digits whose ISO 13616 mod-97 remainder is 1. A phone
number is 7–15 digits, optionally with a leading ``+`` and spaces, dots, dashes or parentheses.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

import msgspec

from edgeserve.records import RequestRecord

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\w.])\d(?:[ -]?\d){12,18}(?![\w.])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ()./-]{5,}\d(?!\w)")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_ok(text: str) -> bool:
    s = text.replace(" ", "")
    if not 15 <= len(s) <= 34:
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _card_ok(text: str) -> bool:
    return luhn_ok(re.sub(r"[ -]", "", text))


def _ip_ok(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _phone_ok(text: str) -> bool:
    return _DATE.fullmatch(text) is None and 7 <= sum(c.isdigit() for c in text) <= 15


# (pattern, kind, check): applied in this order, each to the text the previous ones left
_KINDS: tuple[tuple[re.Pattern[str], str, Callable[[str], bool] | None], ...] = (
    (_EMAIL, "email", None), (_IBAN, "iban", iban_ok), (_CARD, "card", _card_ok),
    (_IPV4, "ip", _ip_ok), (_IPV6, "ip", _ip_ok), (_PHONE, "phone", _phone_ok))
_DIGIT = re.compile(r"\d")


def _substitute(text: str, name: Callable[[str, str], str]) -> str:
    """``text`` with each personal datum replaced by ``name(kind, datum)``.

    Every kind needs a digit, an ``@`` (e-mail) or two colons (IPv6): a text with none of them is
    returned as it is without running the patterns, which is most texts."""
    if "@" not in text and text.count(":") < 2 and _DIGIT.search(text) is None:
        return text
    for pattern, kind, ok in _KINDS:
        def repl(m: re.Match[str], kind: str = kind,
                 ok: Callable[[str], bool] | None = ok) -> str:
            value = m.group()
            return name(kind, value) if ok is None or ok(value) else value

        text = pattern.sub(repl, text)
    return text


def mask(text: str) -> str:
    """``text`` with the personal data above replaced by its kind."""
    return _substitute(text, _kind_only)


def _kind_only(kind: str, value: str) -> str:
    return f"<{kind}>"


_PLACEHOLDER = re.compile(r"<(?:email|iban|card|ip|phone)_\d+>")
_PARTIAL = re.compile(r"<[a-z]{0,5}(?:_\d{0,9})?")  # what a placeholder's first part can be


class Placeholders:
    """One request's personal data behind numbered placeholders (``<email_1>``, ``<phone_2>``),
    the same datum under the same name wherever it occurs, and the way back."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # datum → placeholder
        self.values: dict[str, str] = {}  # placeholder → datum
        self._counts: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.values)

    def _name(self, kind: str, value: str) -> str:
        name = self.names.get(value)
        if name is None:
            n = self._counts[kind] = self._counts.get(kind, 0) + 1
            name = self.names[value] = f"<{kind}_{n}>"
            self.values[name] = value
        return name

    def mask(self, text: str) -> str:
        return _substitute(text, self._name)

    def restore(self, text: str) -> str:
        """``text`` with this request's placeholders replaced by the data (others left)."""
        if "<" not in text:
            return text
        return _PLACEHOLDER.sub(lambda m: self.values.get(m.group(), m.group()), text)


class StreamRestorer:
    """:meth:`Placeholders.restore` over a text that arrives in pieces: a piece's tail that may be
    the start of a placeholder split across pieces is held back until the next piece (or
    :meth:`flush`) tells."""

    def __init__(self, placeholders: Placeholders) -> None:
        self.placeholders = placeholders
        self.held = ""

    def feed(self, piece: str) -> str:
        text = self.held + piece
        cut = text.rfind("<")
        if cut >= 0 and _PARTIAL.fullmatch(text, cut) is not None:
            self.held, text = text[cut:], text[:cut]
        else:
            self.held = ""
        return self.placeholders.restore(text)

    def flush(self) -> str:
        text, self.held = self.held, ""
        return self.placeholders.restore(text)


def mask_record(rec: RequestRecord) -> RequestRecord:
    """``rec`` with its free-text fields masked: a copy where one changes, else ``rec`` itself
    (the request's content itself is never written; what can carry it is an error message an
    upstream echoed, or a model name)."""
    changes = {}
    for f in _TEXT_FIELDS:
        value = getattr(rec, f)
        if isinstance(value, str) and (masked := mask(value)) != value:
            changes[f] = masked
    return msgspec.structs.replace(rec, **changes) if changes else rec


_TEXT_FIELDS = ("error", "decision_reason", "model", "placement")
