"""``GET /v1/events``: the trace header, then each decision's record as the trace has it, with the
inputs the policy saw."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

from edgeserve.records import RequestRecord, TraceHeader, decode
from tests.edgeserve.gateway.conftest import (
    Proc,
    chat,
    chat_body,
    gateway,
    get_json,
    procs,
    upstream,
    wait_records,
)

__all__ = ["procs"]


def test_the_event_stream_carries_each_record_with_the_policy_s_inputs(
        tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", f"loc={loc.url}", "--profile", "phone-soc"))
    assert "always_cloud" in get_json(gw.url + "/health")["policies"]
    lines: list[bytes] = []
    got_two = threading.Event()

    def listen() -> None:
        with urllib.request.urlopen(gw.url + "/v1/events", timeout=30) as r:
            for raw in r:
                if raw.startswith(b"data:"):
                    lines.append(raw[5:].strip())
                    if len(lines) == 2:
                        got_two.set()
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    while not lines:  # subscribed once the header came
        t.join(0.02)
    assert chat(gw, chat_body())[0] == 200
    assert got_two.wait(10)
    header, rec = decode(lines[0]), decode(lines[1])
    assert isinstance(header, TraceHeader) and header.producer == "edgeserve gateway"
    assert isinstance(rec, RequestRecord) and rec.placement == "local:loc"
    assert rec.decision_queue == 0
    assert rec.decision_battery is not None and 0.0 < rec.decision_battery <= 1.0
    written = wait_records(tmp_path, 1)[0]
    assert written["id"] == rec.id and written["decision_battery"] == rec.decision_battery
