"""End to end: the gateway in front of two real ``edgeserve serve`` processes (tiny model).

One server stands for the device, the other for the cloud. Expensive: two vLLM engines on the
CPU, started one after the other.
"""

from __future__ import annotations

import json
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


def test_gateway_in_front_of_two_edgeserve_servers(
        servers: tuple[ServerProcess, ServerProcess], tmp_path: Path, procs: list[Proc]) -> None:
    dev, cloud = servers
    procs.append(gw := gateway(tmp_path, "--local", f"dev={dev.url}", "--cloud", f"c={cloud.url}",
                               "--policy", "always_local", "--profile", "jetson-orin-nano"))
    image = png_data_url(320, 240)
    status, headers, raw = chat(gw, chat_body(image=image))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "local:dev", raw
    assert isinstance(content(raw), str)
    rec = trace_records(tmp_path)[-1]
    assert rec["placement"] == "local:dev" and rec["prompt_tokens"] > rec["image_tokens"] > 0
    assert rec["source_width"] == 320 and rec["predicted_local_s"] > 0
    assert dev.metric("edgeserve_requests_total", 'outcome="ok"') == 1

    post(gw.url + "/admin/policy", {"policy": "always_cloud"})
    status, headers, raw = chat(gw, chat_body(image=image, stream=True))
    assert status == 200 and headers["X-Edgeserve-Placement"] == "cloud:c"
    assert raw.decode().rstrip().endswith("data: [DONE]")
    assert cloud.metric("edgeserve_requests_total", 'outcome="ok"') == 1
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
