"""benchmarks/gpu_compare.py: every server gets the same model, limits and image budget."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_compare import GpuCompareConfig, Server, server_summary  # noqa: E402

from edgeserve.bench.sweep import SweepResult  # noqa: E402
from models.random_shapes import build  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("qwen2-vl-2b", tmp_path_factory.mktemp("m") / "qwen2-vl-2b")


def test_servers_share_model_limits_and_image_budget(model: Path) -> None:
    cfg = GpuCompareConfig(model=model, servers=tuple(Server), image_tokens=256)
    assert cfg.max_pixels == 256 * 28 * 28
    for server in (Server.SPLIT, Server.INLINE, Server.VLLM, Server.VLLM_BEST):
        argv = cfg.argv(server)
        assert argv[argv.index("--max-num-seqs") + 1] == "64"
        assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85"
        assert argv[argv.index("--served-model-name") + 1] == "m"
    vllm = cfg.argv(Server.VLLM)
    assert vllm[vllm.index("--load-format") + 1] == "dummy"  # no weights in the folder
    assert json.loads(vllm[vllm.index("--mm-processor-kwargs") + 1]) == {"max_pixels": 200704}
    assert "--api-server-count" not in vllm
    best = cfg.argv(Server.VLLM_BEST)
    assert best[best.index("--api-server-count") + 1] == "4"
    split = cfg.argv(Server.SPLIT)
    assert split[split.index("--max-pixels") + 1] == "200704" and "split" in split
    assert "--workers" not in split  # edgeserve's own default for the host's cores


def test_the_summary_reads_figures_at_the_highest_rate_sustained_within_3_s() -> None:
    def point(rate: float, p99: float, busy: float) -> dict[str, object]:
        return {"request_rate": rate, "completed": 10, "failed": 0, "p99_ttft_ms": p99,
                "gpu_busy": busy, "stall": 0.1 * rate, "cpu_s_per_request": 0.5}

    sweep = SweepResult(3000.0, [point(2, 500, 0.2), point(4, 2000, 0.4), point(8, 5000, 0.5)])
    s = server_summary(sweep)
    assert s["at_rate"] == 4 and s["gpu_busy"] == 0.4 and s["stall"] == pytest.approx(0.4)
    assert s["sustained_rate_p99_3s"] == pytest.approx(4 + 4 * (1000 / 3000))
    assert s["sustained_rate_p99_1s"] == pytest.approx(2 + 2 * (500 / 1500))


def test_a_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="build-random"):
        GpuCompareConfig(model=tmp_path, servers=(Server.VLLM,))


def test_parts_merge_into_the_schema_with_a_table_and_a_plot(model: Path, tmp_path: Path) -> None:
    from gpu_compare import merge

    cfg = GpuCompareConfig(model=model, servers=tuple(Server), parts=tmp_path / "parts",
                           out=tmp_path / "out" / "gpu_compare.json")
    cfg.budget_dir.mkdir(parents=True)
    for name, p99 in (("edgeserve-split", 800.0), ("vllm", 2500.0)):
        sweep = SweepResult(3000.0, [{"request_rate": 2.0, "completed": 5, "failed": 0,
                                      "p99_ttft_ms": p99, "request_throughput": 2.0,
                                      "gpu_busy": 0.3, "stall": 0.1,
                                      "cpu_s_per_request": 0.2}])
        (cfg.budget_dir / f"{name}.json").write_text(json.dumps(
            {"sweep": sweep.to_json(), "command": f"start {name}"}))
    out = merge(cfg, "NVIDIA H200")
    on_disk = json.loads(cfg.out.read_text())
    assert on_disk["model"] == "qwen2-vl-2b" and on_disk["device"] == "NVIDIA H200"
    assert set(on_disk["servers"]) == {"edgeserve-split", "vllm"} == set(out["servers"])
    split = on_disk["servers"]["edgeserve-split"]
    assert split["sustained_rate_p99_3s"] == 2.0 and split["sustained_rate_p99_1s"] == 2.0
    assert on_disk["servers"]["vllm"]["sustained_rate_p99_1s"] == 0.0
    assert {"gpu_busy", "stall"} <= set(split)
    assert cfg.out.with_suffix(".png").stat().st_size > 0
    assert "edgeserve-split" in cfg.out.with_suffix(".md").read_text()
