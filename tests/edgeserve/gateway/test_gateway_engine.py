"""End to end: the gateway in front of two real ``edgeserve serve`` processes (tiny model).

One server stands for the device, the other for the cloud. Expensive: two vLLM engines on the
CPU, started one after the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    Proc,
    chat,
    chat_body,
    gateway,
    get_json,
    png_data_url,
    post,
    trace_records,
    wait_records,
)

from edgeserve.bench.server_process import ServerProcess
from edgeserve.net import free_port

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory,
            tiny_model_dir: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    d = tmp_path_factory.mktemp("servers")
    args = ["--model", str(tiny_model_dir), "--workers", "1", "--max-model-len", "4096",
            "--max-num-seqs", "4", "--sample-interval", "0.5"]
    dev = ServerProcess.edgeserve(args, d / "dev.log").start().ready()  # one at a time: they share 2 cores
    try:
        cloud = ServerProcess.edgeserve(args, d / "cloud.log").start().ready()
    except BaseException:
        dev.stop()
        raise
    yield dev, cloud
    cloud.stop()
    dev.stop()


def content(raw: bytes) -> str:
    return str(json.loads(raw)["choices"][0]["message"]["content"])


class RecordingProxy:
    """A TCP proxy in a thread of the test: what the gateway sends to the server behind it is
    kept (``sent``), the bytes pass both ways unchanged."""

    def __init__(self, target_port: int) -> None:
        self.port, self.target_port = free_port(), target_port
        self.sent = bytearray()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, keep: bool) -> None:
            try:
                while data := await r.read(1 << 16):
                    if keep:
                        self.sent += data
                    w.write(data)
                    await w.drain()
            finally:
                w.close()

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target_port)
            with contextlib.suppress(asyncio.CancelledError):  # stopped: the pipes closed
                await asyncio.gather(pipe(r, uw, True), pipe(ur, w, False),
                                     return_exceptions=True)

        async def main() -> None:
            server = await asyncio.start_server(serve, "127.0.0.1", self.port)
            ready.set()
            async with server:
                await server.serve_forever()

        asyncio.set_event_loop(self.loop)
        with contextlib.suppress(asyncio.CancelledError):  # stopped
            self.loop.run_until_complete(main())
        rest = asyncio.all_tasks(self.loop)  # the pipes, cancelled too: let them close
        self.loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        def cancel_all() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()

        self.loop.call_soon_threadsafe(cancel_all)
        self.thread.join(5)


def test_mask_cloud_keeps_personal_data_from_a_real_cloud_server(
        servers: tuple[ServerProcess, ServerProcess], tmp_path: Path, procs: list[Proc]) -> None:
    dev, cloud = servers  # before the test below, which stops the cloud
    proxy = RecordingProxy(int(cloud.url.rsplit(":", 1)[1]))
    try:
        procs.append(gw := gateway(tmp_path, "--local", f"dev={dev.url}",
                                   "--cloud", f"c={proxy.url}", "--policy", "always_cloud",
                                   "--mask-cloud"))
        text = "Reply to jane.doe@example.org, card 4111 1111 1111 1111, from 10.1.2.3"
        status, headers, raw = chat(gw, chat_body(text))
        assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:c", raw
        assert isinstance(content(raw), str)
        status, headers, raw = chat(gw, chat_body(text, stream=True))
        assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:c"
        events = [e for e in raw.decode().split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        assert all(json.loads(e[6:])["object"] == "chat.completion.chunk" for e in events[:-1])
        sent = proxy.sent.decode("utf-8", "replace")
        assert sent.count("<email_1>, card <card_1>, from <ip_1>") == 2
        for item in ("jane.doe@example.org", "4111 1111 1111 1111", "10.1.2.3"):
            assert item not in sent
    finally:
        proxy.stop()


def test_gateway_in_front_of_two_edgeserve_servers(
        servers: tuple[ServerProcess, ServerProcess], tmp_path: Path, procs: list[Proc]) -> None:
    dev, cloud = servers
    ok = 'outcome="ok"'
    dev_ok, cloud_ok = dev.metric("edgeserve_requests_total", ok), cloud.metric(
        "edgeserve_requests_total", ok)  # what the test above left
    procs.append(gw := gateway(tmp_path, "--local", f"dev={dev.url}", "--cloud", f"c={cloud.url}",
                               "--policy", "always_local", "--profile", "jetson-orin-nano"))
    image = png_data_url(320, 240)
    status, headers, raw = chat(gw, chat_body(image=image))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "local:dev", raw
    assert isinstance(content(raw), str)
    rec = trace_records(tmp_path)[-1]
    assert rec["placement"] == "local:dev" and rec["prompt_tokens"] > rec["image_tokens"] > 0
    assert rec["source_width"] == 320 and rec["predicted_local_s"] > 0
    assert dev.metric("edgeserve_requests_total", ok) == dev_ok + 1

    post(gw.url + "/admin/policy", {"policy": "always_cloud"})
    status, headers, raw = chat(gw, chat_body(image=image, stream=True))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:c"
    assert raw.decode().rstrip().endswith("data: [DONE]")
    assert cloud.metric("edgeserve_requests_total", ok) == cloud_ok + 1
    assert wait_records(tmp_path, 2)[-1]["first_token_s"] is not None

    # an image the server cannot decode: edgeserve's own 400, relayed, and no fallback
    status, _, raw = chat(gw, chat_body(image="data:image/png;base64,bm90IGFuIGltYWdl"))
    assert status == 400, raw
    rec = wait_records(tmp_path, 3)[-1]
    assert rec["attempts"] == ["cloud:c"] and rec["outcome"] == "rejected"

    cloud.stop()  # the cloud goes away: the next request still gets an answer, locally
    status, headers, raw = chat(gw, chat_body(image=image))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "local:dev"
    rec = wait_records(tmp_path, 4)[-1]
    # tried first unless the gateway's probe found it gone before the request came
    assert rec["attempts"] in (["cloud:c", "local:dev"], ["local:dev"])
    assert get_json(gw.url + "/health")["targets"][1]["up"] is False

