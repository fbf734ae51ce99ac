"""Personal data in a request never reaches the gateway's trace file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Proc, chat, chat_body, gateway, trace_records, upstream

from edgeserve.gateway.pii import iban_ok, luhn_ok, mask

PII = ["jane.doe@example.org", "+44 20 7946 0958", "4111 1111 1111 1111",
       "DE89 3704 0044 0532 0130 00", "192.168.17.4", "2001:db8::42"]


@pytest.mark.parametrize(("text", "masked"), [
    ("write to jane.doe@example.org today", "write to <email> today"),
    ("call +44 20 7946 0958 or (555) 123-4567", "call <phone> or <phone>"),
    ("pay 4111-1111-1111-1111, not 4111 1111 1111 1112", "pay <card>, not 4111 1111 1111 1112"),
    ("IBAN DE89 3704 0044 0532 0130 00; GB82WEST12345698765432",
     "IBAN <iban>; <iban>"),
    ("from 10.0.0.7 and 2001:db8::1", "from <ip> and <ip>"),
    ("on 2026-12-04 at 10:30, 640x480, 3.14, 999.1.1.1, DE88 3704 0044 0532 0130 00",
     "on 2026-12-04 at 10:30, 640x480, 3.14, 999.1.1.1, DE88 3704 0044 0532 0130 00"),
])
def test_mask(text: str, masked: str) -> None:
    assert mask(text) == masked


def _every_pattern(text: str) -> str:
    """The patterns applied without the shortcut for texts that cannot hold personal data."""
    from edgeserve.gateway import pii

    for pattern, repl in ((pii._EMAIL, "<email>"), (pii._IBAN, pii._iban), (pii._CARD, pii._card),
                          (pii._IPV4, pii._ip), (pii._IPV6, pii._ip), (pii._PHONE, pii._phone)):
        text = pattern.sub(repl, text)  # type: ignore[arg-type]
    return text


@pytest.mark.parametrize("text", [
    "user: what is in the picture?", "user: a: b: c", "::1 is the loopback", "fe80::1",
    "mail me at x@y.io", "٣٤٥٦٧٨٩٠١٢ (Arabic-Indic digits)", "no digits, one colon: here", "",
    "assistant: 2001:db8::42 and 10.1.2.3", "call 0044 20 7946 0958",
])
def test_the_shortcut_masks_as_the_patterns_do(text: str) -> None:
    assert mask(text) == _every_pattern(text)


def test_checksums() -> None:
    assert luhn_ok("79927398713") and not luhn_ok("79927398710")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB83 WEST 1234 5698 7654 32")


def test_pii_in_a_request_never_appears_in_the_trace(tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(echo := upstream(tmp_path, "echo", "--status", "400"))
    procs.append(gw := gateway(tmp_path, "--local", echo.url))
    text = "my details: " + ", ".join(PII)
    status, _, raw = chat(gw, chat_body(text, model="jane.doe@example.org"))
    assert status == 400
    assert PII[0] in json.loads(raw)["error"]["message"]  # the client gets its upstream's answer
    rec = trace_records(tmp_path)[-1]
    assert rec["error"].startswith("echo says 400 to: my details: <email>, <phone>, <card>")
    assert rec["model"] == "<email>" and rec["outcome"] == "rejected"
    written = (tmp_path / "gateway.jsonl").read_text()
    for item in PII:
        assert item not in written
        assert item.replace(" ", "") not in written
