"""Personal data kept out of what the gateway writes: e-mail addresses, phone numbers, payment
card numbers, IBANs and IP addresses are replaced by ``<email>``, ``<phone>``, ``<card>``,
``<iban>`` and ``<ip>`` in every text field of a record before it reaches the trace.

Digits alone are ambiguous, so the checksums decide where they exist: a card number is 13–19
digits (spaces or dashes between groups allowed) that pass the Luhn check; an IBAN is a country
code, two check digits and 11–30 letters or digits whose ISO 13616 mod-97 remainder is 1. A phone
number is 7–15 digits, optionally with a leading ``+`` and spaces, dots, dashes or parentheses.
"""

from __future__ import annotations

import ipaddress
import re

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


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", m.group())
    return "<card>" if luhn_ok(digits) else m.group()


def _iban(m: re.Match[str]) -> str:
    return "<iban>" if iban_ok(m.group()) else m.group()


def _ip(m: re.Match[str]) -> str:
    try:
        ipaddress.ip_address(m.group())
    except ValueError:
        return m.group()
    return "<ip>"


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _phone(m: re.Match[str]) -> str:
    if _DATE.fullmatch(m.group()):
        return m.group()
    n = sum(c.isdigit() for c in m.group())
    return "<phone>" if 7 <= n <= 15 else m.group()


_DIGIT = re.compile(r"\d")


def mask(text: str) -> str:
    """``text`` with the personal data above replaced by its kind.

    Every kind needs a digit, an ``@`` (e-mail) or two colons (IPv6): a text with none of them is
    returned as it is without running the patterns, which is most texts."""
    if "@" not in text and text.count(":") < 2 and _DIGIT.search(text) is None:
        return text
    text = _EMAIL.sub("<email>", text)
    text = _IBAN.sub(_iban, text)
    text = _CARD.sub(_card, text)
    text = _IPV4.sub(_ip, text)
    text = _IPV6.sub(_ip, text)
    return _PHONE.sub(_phone, text)


def mask_record(rec: RequestRecord) -> RequestRecord:
    """A copy of ``rec`` with its free-text fields masked (the request's content itself is never
    written; what can carry it is an error message an upstream echoed, or a model name)."""
    return msgspec.structs.replace(
        rec, **{f: mask(v) for f in _TEXT_FIELDS if isinstance(v := getattr(rec, f), str)})


_TEXT_FIELDS = ("error", "decision_reason", "model", "placement")
