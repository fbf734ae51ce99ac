"""The exported vision encoder: ONE graph, written by ``edgeserve models export-encoder``, equals
transformers' own Qwen2-VL tower (float32, eager attention) on every image size and batch."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeserve.cli.main import main
from models.onnx_encoder import (
    EncoderMeta,
    OnnxEncoder,
    ProviderNotAvailableError,
    check_inputs,
    export_encoder,
    load_reference_tower,
    reference_embeds,
)

BOUND = 1e-4  # max abs diff, graph in ONNX Runtime vs the tower in PyTorch; measured about 2e-7
HIDDEN = 128  # the tiny model's language-model width: image_embeds' second dimension


@pytest.fixture(scope="module")
def cli_export(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The CLI's export of the tiny model (graph path, what it printed): the graph every test uses."""
    out_dir = tmp_path_factory.mktemp("onnx")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["models", "export-encoder", str(tiny_model_dir), "--out", str(out_dir)])
    assert rc == 0
    return out_dir / "encoder.onnx", stdout.getvalue()


@pytest.fixture(scope="module")
def encoder(cli_export: tuple[Path, str]) -> OnnxEncoder:
    return OnnxEncoder(cli_export[0])


@pytest.fixture(scope="module")
def tower(tiny_model_dir: Path) -> object:
    return load_reference_tower(tiny_model_dir)


@pytest.mark.parametrize(("images", "grids"), [
    (((224, 224),), [[1, 16, 16]]),
    (((448, 336),), [[1, 24, 32]]),
    (((644, 476),), [[1, 34, 46]]),
    (((224, 224), (448, 336)), [[1, 16, 16], [1, 24, 32]]),
    (((56, 56), (644, 476), (224, 224)), [[1, 4, 4], [1, 34, 46], [1, 16, 16]]),
], ids=["224x224", "448x336", "644x476", "two-images", "three-images"])
def test_one_graph_matches_transformers_tower(
        encoder: OnnxEncoder, tower: object, images: tuple[tuple[int, int], ...],
        grids: list[list[int]]) -> None:
    pixel_values, grid_thw = check_inputs(images)  # mm_preproc, as the server preprocesses
    assert grid_thw.tolist() == grids
    got, want = encoder(pixel_values, grid_thw), reference_embeds(tower, pixel_values, grid_thw)
    tokens = sum(t * h * w for t, h, w in grids) // 4
    assert got.shape == want.shape == (tokens, HIDDEN)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= BOUND


@pytest.mark.parametrize("grids", [[[2, 4, 6]], [[2, 4, 6], [1, 8, 8]]], ids=["video", "mixed"])
def test_frames_attend_separately_as_in_transformers(
        encoder: OnnxEncoder, tower: object, grids: list[list[int]]) -> None:
    grid_thw = np.array(grids, dtype=np.int64)
    pixel_values = np.random.default_rng(1).standard_normal(
        (int(grid_thw.prod(axis=1).sum()), 1176), dtype=np.float32)
    got, want = encoder(pixel_values, grid_thw), reference_embeds(tower, pixel_values, grid_thw)
    assert got.shape == want.shape and np.abs(got - want).max() <= BOUND


def test_graph_has_the_served_interface_with_dynamic_sizes(encoder: OnnxEncoder) -> None:
    inputs = [(i.name, i.type, i.shape) for i in encoder.session.get_inputs()]
    outputs = [(o.name, o.type, o.shape) for o in encoder.session.get_outputs()]
    # one image (or video) per run, any number of patches; OnnxEncoder runs a batch image by image
    assert inputs == [("pixel_values", "tensor(float)", ["num_patches", 1176]),
                      ("image_grid_thw", "tensor(int64)", [1, 3])]
    assert outputs == [("image_embeds", "tensor(float)", ["num_tokens", HIDDEN])]
    assert encoder.images_per_run == 1


def test_attention_is_onnx_runtimes_fused_kernel_without_a_mask(cli_export: tuple[Path, str]) -> None:
    import onnx

    ops = [n.op_type for n in onnx.load(str(cli_export[0])).graph.node]
    # one fused MultiHeadAttention per block; no Softmax over (patches × patches) scores, no
    # Conv (the patch embed is one MatMul), and nothing builds a mask (Where/Equal)
    assert ops.count("MultiHeadAttention") == 2
    assert not {"Softmax", "Conv", "Where", "Equal"} & set(ops)
    assert EncoderMeta.read(cli_export[0]).attention == (
        "com.microsoft.MultiHeadAttention per frame, no mask")


def test_metadata_describes_the_model_and_the_verification(
        cli_export: tuple[Path, str], tiny_model_dir: Path) -> None:
    graph, _ = cli_export
    raw = json.loads(graph.with_name("encoder.json").read_text())
    meta = EncoderMeta.read(graph)
    assert (meta.model_id, meta.architecture, meta.model_type) == (
        "tiny-qwen2-vl", "Qwen2VLForConditionalGeneration", "qwen2_vl")
    assert (meta.patch_size, meta.merge_size, meta.temporal_patch_size, meta.in_channels) == (14, 2, 2, 3)
    assert (meta.embed_dim, meta.hidden_size, meta.patch_dim, meta.opset) == (64, HIDDEN, 1176, 18)
    assert raw["inputs"] == ["pixel_values", "image_grid_thw"] and raw["output"] == "image_embeds"
    assert meta.exporter == "torch.onnx.export (TorchScript, dynamo=False)"
    assert [c.grid_thw for c in meta.checks] == [
        [[1, 16, 16]], [[1, 24, 32]], [[1, 34, 46]], [[1, 16, 16], [1, 24, 32]]]
    assert [c.tokens for c in meta.checks] == [64, 192, 391, 256]
    assert meta.max_abs_diff == max(c.max_abs_diff for c in meta.checks) <= BOUND
    assert meta.graph_bytes == graph.stat().st_size
    assert meta.mismatches(tiny_model_dir) == []
    assert meta.failed(tolerance=1e-4) == [] and meta.failed(tolerance=0.0) == meta.checks


def test_metadata_tells_another_model_apart(cli_export: tuple[Path, str], tiny_model_dir: Path,
                                            tmp_path: Path) -> None:
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    cfg["vision_config"]["depth"] = 4
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    reasons = EncoderMeta.read(cli_export[0]).mismatches(tmp_path)
    assert [r.split(":")[0] for r in reasons] == ["vision_config_sha256", "weights_fingerprint"]


def test_cli_prints_graph_size_and_differences(cli_export: tuple[Path, str]) -> None:
    graph, out = cli_export
    lines = out.splitlines()
    assert lines[0] == f"encoder graph: {graph} ({graph.stat().st_size / 1e6:.1f} MB)"
    assert lines[2].startswith("exporter:      torch.onnx.export (TorchScript, dynamo=False), opset 18")
    assert sum(ln.startswith("  grid [1, ") for ln in lines) == 4
    assert float(lines[-1].removeprefix("max abs diff:")) <= BOUND


@pytest.mark.parametrize(("config", "message"), [
    (None, "no config.json in {dir}: not a model folder"),
    ({"model_type": "llava"}, "{dir} is a llava model, not Qwen2-VL (only Qwen2-VL's vision tower is exported)"),
], ids=["empty-folder", "other-model"])
def test_cli_refuses_a_folder_that_is_not_qwen2_vl(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict | None, message: str) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["models", "export-encoder", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"edgeserve models export-encoder: {message.format(dir=tmp_path)}\n"
    assert not (tmp_path / "o").exists()


def test_cli_reports_missing_weights_in_one_line(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(tiny_model_dir / "config.json", tmp_path / "config.json")
    assert main(["models", "export-encoder", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("edgeserve models export-encoder: ") and err.count("\n") == 1


def test_unknown_provider_is_a_clear_error(cli_export: tuple[Path, str]) -> None:
    with pytest.raises(ProviderNotAvailableError,
                       match=r"NoSuchExecutionProvider not installed; .* has: .*CPUExecutionProvider"):
        OnnxEncoder(cli_export[0], providers=["NoSuch"])


def test_session_is_cpu_with_the_threads_asked_for(cli_export: tuple[Path, str]) -> None:
    enc = OnnxEncoder(cli_export[0], providers=["cpu"], intra_op_threads=2)
    opts = enc.session.get_session_options()
    assert enc.session.get_providers() == ["CPUExecutionProvider"]
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (2, 1)


def test_inputs_that_disagree_are_refused_before_running(encoder: OnnxEncoder) -> None:
    with pytest.raises(ValueError, match=r"grid_thw \[\[1, 4, 4\]\] is 16 patches, pixel_values has 20"):
        encoder(np.zeros((20, 1176), np.float32), np.array([[1, 4, 4]]))
    with pytest.raises(ValueError, match=r"pixel_values must be \(patches, 1176\)"):
        encoder(np.zeros((16, 588), np.float32), np.array([[1, 4, 4]]))


def test_dynamo_exporter_gives_a_verified_graph_too(tiny_model_dir: Path, tmp_path: Path) -> None:
    graph = export_encoder(tiny_model_dir, tmp_path, exporter="dynamo")
    meta = EncoderMeta.read(graph)
    assert meta.exporter == "torch.onnx.export (torch.export, dynamo=True)"
    assert meta.max_abs_diff <= BOUND and len(meta.checks) == 4
    assert meta.attention == "MatMul-Softmax-MatMul per frame, no mask"
    assert meta.graph_bytes == graph.stat().st_size + (tmp_path / "encoder.onnx.data").stat().st_size
