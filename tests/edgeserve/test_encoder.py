"""The vision encoder stage without an engine: its start-up checks, the shape check that guards
the engine, and real worker processes that encode through shared memory.

Specification: a config with ``encoder: onnx`` and no export, a foreign export or an absent
provider is refused before anything starts, with the fix in one paragraph; an ``image_embeds``
array fits an image only with ``t·h·w/merge²`` rows and the model's hidden size as columns; a
worker hands back exactly what the exported graph gives for ``mm_preproc``'s patches, stamped
normalize ≤ encode; a job whose worker is SIGKILLed while encoding is run again by the
replacement and gets the same embeddings, leaving no segment.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import mm_preproc
from edgeserve.config import ConfigError, EncoderKind, ServeConfig
from edgeserve.encoder import EncoderError, EncoderSpec, check_encoder, embeds_shape_error
from edgeserve.preproc_pool.inline import InlinePreproc
from edgeserve.preproc_pool.messages import PreprocParams, SourceKind
from edgeserve.preproc_pool.pool import ImageInput, PreprocPool
from edgeserve.start_failures import explain
from models.onnx_encoder import GRAPH_NAME, META_NAME, EncoderMeta, OnnxEncoder

MAX_PIXELS = 1_003_520  # the tiny model's: a 1 MP image is 1280 tokens, ~0.5 s to encode


@pytest.fixture(scope="module")
def export_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's export (``make model`` writes it); exported here when absent or stale."""
    folder = tiny_model_dir / "onnx"
    if (folder / META_NAME).is_file() and not EncoderMeta.read(folder).mismatches(tiny_model_dir):
        return folder
    from models.onnx_encoder import export_encoder

    out = tmp_path_factory.mktemp("onnx")
    export_encoder(tiny_model_dir, out)
    return out


def cfg(model: Path, **kw: object) -> ServeConfig:
    return ServeConfig(model=str(model), workers=1, **kw)  # type: ignore[arg-type]


def png(w: int, h: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def my_segments() -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").glob(f"edgeserve_{os.getpid()}_*"))


# ---- the shape check ------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "grid", "fits"), [
    ((64, 128), (1, 16, 16), True),  # 16·16/4 rows
    ((391, 128), (1, 34, 46), True),
    ((128, 128), (2, 16, 16), True),  # two frames: twice the rows
    ((63, 128), (1, 16, 16), False),  # a row short
    ((64, 64), (1, 16, 16), False),  # another model's width
    ((64, 128, 1), (1, 16, 16), False),
    ((64,), (1, 16, 16), False),
    ((64, 128), (1, 15, 16), False),  # h not a multiple of the merge
    ((0, 128), (0, 16, 16), False),
    ((64, 128), (16, 16), False),
])
def test_embeds_fit_a_grid_only_with_thw_over_merge_squared_rows_and_hidden_columns(
    shape: tuple[int, ...], grid: tuple[int, ...], fits: bool
) -> None:
    why = embeds_shape_error(shape, grid, merge_size=2, hidden_size=128)
    assert (why is None) is fits
    if not fits:
        assert str(list(grid)) in why or str(tuple(shape)) in why  # type: ignore[operator]


def test_a_wrong_shape_is_explained_with_the_shape_it_needed() -> None:
    assert embeds_shape_error((60, 128), (1, 16, 16), 2, 128) == (
        "image_embeds has shape (60, 128), but the grid [1, 16, 16] needs (64, 128) "
        "(t·h·w/2² rows, the model's hidden size columns)")


# ---- configuration and start-up checks -----------------------------------------------------
def test_the_default_is_decided_at_start_and_none_has_no_encoder(tiny_model_dir: Path) -> None:
    c = cfg(tiny_model_dir)
    assert c.encoder is EncoderKind.AUTO and c.encoder_path is None
    assert check_encoder(c) is None  # until edgeserve.auto_defaults.resolve decides
    assert check_encoder(cfg(tiny_model_dir, encoder="none")) is None


def test_onnx_defaults_to_the_export_beside_the_model(tiny_model_dir: Path) -> None:
    c = cfg(tiny_model_dir, encoder="onnx")
    assert c.encoder is EncoderKind.ONNX and c.encoder_path == str(tiny_model_dir / "onnx")
    assert (c.encoder_provider, c.encoder_threads, c.encoder_provider_options) == ("CPU", 1, {})


@pytest.mark.parametrize(("field", "value", "message"), [
    ("encoder", "npu", "encoder must be 'auto', 'none' or 'onnx'"),
    ("encoder_threads", 0, "encoder_threads must be an integer >= 1"),
    ("encoder_provider", " ", "encoder_provider must name"),
    ("encoder_provider_options", {"device_type": ["NPU"]}, "encoder_provider_options must map"),
])
def test_bad_encoder_values_name_their_field(tiny_model_dir: Path, field: str, value: object,
                                             message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg(tiny_model_dir, **{field: value})


def test_a_checked_export_becomes_the_spec_every_worker_opens(tiny_model_dir: Path,
                                                              export_dir: Path) -> None:
    spec = check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(export_dir),
                             encoder_threads=2, encoder_provider_options={"x": 1}))
    assert spec == EncoderSpec(graph=str(export_dir / GRAPH_NAME),
                               provider="CPUExecutionProvider", provider_options={"x": "1"},
                               intra_op_threads=2, merge_size=2, hidden_size=128)


def test_a_missing_export_is_refused_naming_the_command_that_writes_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    c = cfg(tiny_model_dir, encoder="onnx", encoder_path=str(tmp_path))
    with pytest.raises(EncoderError) as e:
        check_encoder(c)
    text = explain(e.value, None)
    assert text.startswith("cannot start: --encoder onnx needs the model's exported vision tower")
    assert f"`edgeserve models export-encoder {tiny_model_dir} --out {tmp_path}`" in text
    assert "\n" not in text


def test_an_export_of_other_weights_is_refused(tiny_model_dir: Path, export_dir: Path,
                                               tmp_path: Path) -> None:
    shutil.copy(export_dir / GRAPH_NAME, tmp_path / GRAPH_NAME)
    meta = json.loads((export_dir / META_NAME).read_text())
    meta["weights_fingerprint"] = "0123456789abcdef"
    (tmp_path / META_NAME).write_text(json.dumps(meta))
    with pytest.raises(EncoderError, match=r"is not the vision tower of .*weights_fingerprint: "
                                           r"graph has '0123456789abcdef'.*Re-export"):
        check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(tmp_path)))


def test_a_provider_that_is_not_installed_is_refused(tiny_model_dir: Path,
                                                     export_dir: Path) -> None:
    with pytest.raises(EncoderError, match=r"QNNExecutionProvider not installed.*"
                                           r"--encoder-provider CPU"):
        check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(export_dir),
                          encoder_provider="QNN"))


def test_openvino_runtime_is_a_provider_of_its_own(tiny_model_dir: Path, export_dir: Path) -> None:
    # openvino:DEVICE: OpenVINO's runtime on the same graph, not ONNX Runtime's OpenVINO EP
    spec = check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(export_dir),
                             encoder_provider="openvino:CPU"))
    assert spec is not None and spec.provider == "openvino:CPU"
    enc = spec.open()
    assert type(enc).__name__ == "OpenVinoEncoder" and enc.providers == ["openvino:CPU"]
    with pytest.raises(EncoderError, match=r"OpenVINO device NPU not present.*--encoder-provider CPU"):
        check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(export_dir),
                          encoder_provider="openvino:NPU"))


# ---- workers that encode ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def params(tiny_model_dir: Path, export_dir: Path) -> PreprocParams:
    spec = check_encoder(cfg(tiny_model_dir, encoder="onnx", encoder_path=str(export_dir)))
    return PreprocParams(min_pixels=3136, max_pixels=MAX_PIXELS, max_image_pixels=30_000_000,
                         max_image_bytes=64 << 20, encoder=spec)


@pytest.fixture
async def pool(params: PreprocParams) -> AsyncIterator[PreprocPool]:
    p = PreprocPool(workers=1, params=params, max_pending=4)
    await p.start()
    yield p
    await p.close()
    assert my_segments() == []


async def test_a_worker_returns_the_graphs_embeddings_of_mm_preprocs_patches(
    pool: PreprocPool, params: PreprocParams, export_dir: Path
) -> None:
    data = png(640, 480)
    got = await pool.submit(ImageInput(SourceKind.SHM, data=data))
    want = mm_preproc.preprocess(data, min_pixels=3136, max_pixels=MAX_PIXELS)
    embeds = OnnxEncoder(export_dir / GRAPH_NAME)(want.pixel_values, want.image_grid_thw)
    r = got.result
    assert r.grid_thw == (1, 34, 46) and got.pixels.shape == r.shape == (391, 128)
    assert got.pixels.dtype == np.float32 and np.array_equal(got.pixels, embeds)
    assert r.start_s <= r.decode_end_s <= r.resize_end_s <= r.normalize_end_s <= r.encode_end_s
    assert embeds_shape_error(got.pixels.shape, r.grid_thw, 2, 128) is None
    assert my_segments() == []


async def test_a_job_whose_worker_is_killed_while_encoding_is_encoded_again(
    pool: PreprocPool, params: PreprocParams, export_dir: Path
) -> None:
    slot = pool.slots[0]
    data = png(1120, 896, 1)
    job = asyncio.create_task(pool.submit(ImageInput(SourceKind.SHM, data=data)))
    for _ in range(3000):
        if slot.stage == "encode":
            break
        await asyncio.sleep(0.001)
    assert slot.stage == "encode"  # the worker said so; its ~0.5 s encode is under way
    victim = slot.pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    done = await job  # one worker: the replacement runs it again
    want = mm_preproc.preprocess(data, min_pixels=3136, max_pixels=MAX_PIXELS)
    embeds = OnnxEncoder(export_dir / GRAPH_NAME)(want.pixel_values, want.image_grid_thw)
    assert done.retries == 1 and np.array_equal(done.pixels, embeds)
    assert my_segments() == []
    after = await pool.submit(ImageInput(SourceKind.SHM, data=png(224, 224)))
    assert after.pixels.shape == (64, 128) and slot.restarts == 1 and slot.pid != victim
    assert slot.stage == "idle"


async def test_inline_mode_encodes_in_the_frontend(params: PreprocParams) -> None:
    inline = InlinePreproc(params, max_pending=2)
    await inline.start()
    got = await inline.submit(ImageInput(SourceKind.SHM, data=png(448, 336)))
    assert got.result.grid_thw == (1, 24, 32) and got.pixels.shape == (192, 128)
    assert got.result.normalize_end_s <= got.result.encode_end_s
