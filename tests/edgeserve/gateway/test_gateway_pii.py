"""Personal data in a request never reaches the gateway's trace file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Proc, answer, chat, chat_body, gateway, post, trace_records, upstream

from edgeserve.gateway.pii import Placeholders, StreamRestorer, iban_ok, luhn_ok, mask

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
    from edgeserve.gateway.pii import _KINDS

    for pattern, kind, ok in _KINDS:
        text = pattern.sub(
            lambda m, kind=kind, ok=ok: f"<{kind}>" if ok is None or ok(m.group()) else m.group(),
            text)
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


def test_placeholders_are_numbered_per_datum_and_restored_across_any_split() -> None:
    ph = Placeholders()
    masked = ph.mask("mail jane.doe@example.org, then bob@example.com, then jane.doe@example.org "
                     "or call +44 20 7946 0958")
    assert masked == "mail <email_1>, then <email_2>, then <email_1> or call <phone_1>"
    answer_text = "Sure: <email_1> and <phone_1>; not <email_9> nor a < b or <emai"
    whole = ("Sure: jane.doe@example.org and +44 20 7946 0958; not <email_9> nor a < b or "
             "<emai")
    assert ph.restore(answer_text) == whole
    for i in range(len(answer_text) + 1):  # every split into two pieces
        r = StreamRestorer(ph)
        assert r.feed(answer_text[:i]) + r.feed(answer_text[i:]) + r.flush() == whole
    r = StreamRestorer(ph)  # one character at a time
    assert "".join(r.feed(c) for c in answer_text) + r.flush() == whole
    assert not Placeholders() and Placeholders().restore("<email_1>") == "<email_1>"


def test_mask_cloud_sends_placeholders_and_the_client_gets_its_data_back(
        tmp_path: Path, procs: list[Proc]) -> None:
    cloud_got, local_got = tmp_path / "cloud_got.jsonl", tmp_path / "local_got.jsonl"
    procs.append(cl := upstream(tmp_path, "cl", "--echo", "--record", str(cloud_got)))
    procs.append(loc := upstream(tmp_path, "loc", "--echo", "--record", str(local_got)))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", cl.url,
                               "--policy", "always_cloud", "--mask-cloud"))
    text = ("Write to jane.doe@example.org or call +44 20 7946 0958, card 4111 1111 1111 1111; "
            "jane.doe@example.org once more")
    status, headers, raw = chat(gw, chat_body(text))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:cloud0"
    assert answer(raw)["said"] == text  # restored
    status, headers, raw = chat(gw, chat_body(text, stream=True))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:cloud0"
    events = [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    streamed = "".join(c["delta"].get("content") or ""
                       for e in events[:-1] for c in json.loads(e)["choices"])
    assert json.loads(streamed)["said"] == text  # restored across 5-character pieces

    got = cloud_got.read_text()
    for item in ("jane.doe@example.org", "7946 0958", "4111 1111 1111 1111"):
        assert item not in got
    sent = [json.loads(line)["messages"][0]["content"][0]["text"] for line in got.splitlines()]
    assert sent == ["Write to <email_1> or call <phone_1>, card <card_1>; <email_1> once more"] * 2

    post(gw.url + "/admin/policy", {"policy": "always_local"})  # local targets: as sent
    status, headers, raw = chat(gw, chat_body(text))
    assert headers["X-Edgeserve-Placement"] == "local:local0" and answer(raw)["said"] == text
    assert "jane.doe@example.org" in local_got.read_text()
    assert len(trace_records(tmp_path)) == 3
    assert "jane.doe@example.org" not in (tmp_path / "gateway.jsonl").read_text()
