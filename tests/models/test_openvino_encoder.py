"""The exported graph on OpenVINO's runtime (``--encoder-provider openvino:CPU``).

OpenVINO reads the same ``encoder.onnx``. Forced to float32 it is the same function as the graph
in ONNX Runtime (bound as the export's, 1e-4); at its default CPU precision — bfloat16 where the
CPU has AMX or AVX-512 BF16, as here — it is within 1 % of the largest |embedding| of
transformers' float32 tower (measured 0.5 %: 1.2–1.4e-3 of 0.24–0.25, about what vLLM's own
bfloat16 tower differs by, 1.4–1.5e-3, benchmarks/onnx_encoder_cpu.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.onnx_encoder import (
    OnnxEncoder,
    OpenVinoEncoder,
    ProviderNotAvailableError,
    check_inputs,
    load_reference_tower,
    open_encoder,
    reference_embeds,
    resolve_providers,
)

BOUND_F32 = 1e-4
BOUND_BF16_REL = 1e-2  # of the largest |embedding|


def cpu_has_bf16() -> bool:
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("flags")).split()
    return "amx_bf16" in flags or "avx512_bf16" in flags


@pytest.fixture(scope="module")
def graph(tiny_model_dir: Path) -> Path:
    return tiny_model_dir / "onnx" / "encoder.onnx"  # built by make next to the model


@pytest.fixture(scope="module")
def tower(tiny_model_dir: Path) -> object:
    return load_reference_tower(tiny_model_dir)


SIZES = [((448, 336),), ((644, 476),), ((1120, 896),), ((224, 224), (448, 336))]


@pytest.mark.parametrize("images", SIZES, ids=["448x336", "644x476", "1120x896", "two-images"])
def test_default_precision_is_within_one_percent_of_the_float32_tower(
        graph: Path, tower: object, images: tuple[tuple[int, int], ...]) -> None:
    enc = open_encoder(graph, "openvino:CPU")
    assert isinstance(enc, OpenVinoEncoder)
    assert ("bfloat16" in enc.precision) == cpu_has_bf16()
    pixel_values, grid_thw = check_inputs(images)
    got, want = enc(pixel_values, grid_thw), reference_embeds(tower, pixel_values, grid_thw)
    assert got.shape == want.shape and got.dtype == np.float32
    err = float(np.abs(got - want).max())
    assert err <= BOUND_BF16_REL * float(np.abs(want).max())
    if cpu_has_bf16():
        assert err > BOUND_F32  # it did compute in bfloat16: not the float32 function


def test_float32_precision_is_the_onnx_runtime_function(graph: Path) -> None:
    ov = OpenVinoEncoder(graph, properties={"INFERENCE_PRECISION_HINT": "f32"})
    assert "f32" in ov.precision or "float32" in ov.precision
    pixel_values, grid_thw = check_inputs(((644, 476), (224, 224)))
    got, want = ov(pixel_values, grid_thw), OnnxEncoder(graph)(pixel_values, grid_thw)
    assert np.abs(got - want).max() <= BOUND_F32


def test_outputs_are_not_overwritten_by_the_next_run(graph: Path) -> None:
    enc = OpenVinoEncoder(graph)
    a_in, b_in = check_inputs(((448, 336),)), check_inputs(((644, 476),))
    a = enc(*a_in)
    a_copy = a.copy()
    enc(*b_in)
    assert np.array_equal(a, a_copy)


def test_provider_names(graph: Path) -> None:
    assert resolve_providers(["openvino:CPU"]) == ["openvino:CPU"]
    assert resolve_providers(["OpenVINO:CPU"]) == ["openvino:CPU"]
    with pytest.raises(ProviderNotAvailableError, match=r"OpenVINO device NPU not present; .* has: CPU"):
        resolve_providers(["openvino:NPU"])
    with pytest.raises(ProviderNotAvailableError, match=r"device NPU not present"):
        OpenVinoEncoder(graph, "NPU")


def test_inputs_that_disagree_are_refused_before_running(graph: Path) -> None:
    enc = OpenVinoEncoder(graph)
    with pytest.raises(ValueError, match=r"grid_thw \[\[1, 4, 4\]\] is 16 patches, pixel_values has 20"):
        enc(np.zeros((20, 1176), np.float32), np.array([[1, 4, 4]]))
