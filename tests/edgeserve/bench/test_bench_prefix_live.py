"""Against the real default server: prefix repetition hits vLLM's prefix cache, chat does not need to.

``edgeserve serve --model <tiny model>`` with its defaults (max_model_len 4096, prefix caching on).
A chat-like run and a prefix-repetition run of 8 requests each; the prefix run must show
prefix-cache hits in ``/metrics`` and carry more prompt tokens per generated token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeserve.bench.arrivals import ArrivalConfig
from edgeserve.bench.datasets import DatasetConfig, DatasetKind
from edgeserve.bench.run import RunConfig, run_benchmark
from edgeserve.bench.server_process import ServerProcess

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    srv = ServerProcess.edgeserve(["--model", str(tiny_model_dir)],
                                  tmp_path_factory.mktemp("prefix") / "server.log").start().ready()
    yield srv.url
    srv.stop()


def _run(url: str, dataset: DatasetConfig) -> RunConfig:
    return RunConfig(base_url=url, dataset=dataset, progress=False,
                     arrivals=ArrivalConfig(num_requests=8, max_concurrency=4))


async def test_prefix_repetition_hits_the_prefix_cache_and_raises_total_over_output(
    url: str, tiny_model_dir: Path
) -> None:
    # the server's max_model_len (4096) bounds prompt + output: the defaults stay within it
    chat_cfg = DatasetConfig(kind=DatasetKind.CHAT)
    assert chat_cfg.chat_prompt_len.upper + chat_cfg.chat_output_len.upper <= 4096
    chat = await run_benchmark(_run(url, chat_cfg))
    # 2 prefixes instead of 10: 8 requests then reuse each prefix 3 times after its first use
    prefix = await run_benchmark(_run(url, DatasetConfig(kind=DatasetKind.PREFIX_REPETITION,
                                                         num_prefixes=2)))
    for r in (chat, prefix):
        assert (r["completed"], r["failed"]) == (8, 0), r["error_counts"]
    assert prefix["total_output_tokens"] == 8 * 128  # ignore_eos: exactly the asked length
    hits = prefix["server"]["prefix_cache_hits"]
    # 6 of the 8 requests find their prefix (~256 of ~530 prompt tokens, in whole KV blocks):
    # a hit rate near 6/8 × 256/530 ≈ 0.36
    assert hits > 0 and prefix["prefix_cache_hit_rate"] > 0.25, prefix["server"]
    ratio = {n: r["total_token_throughput"] / r["output_throughput"]
             for n, r in (("chat", chat), ("prefix", prefix))}
    assert ratio["prefix"] > ratio["chat"], ratio
