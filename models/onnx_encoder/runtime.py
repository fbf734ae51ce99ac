"""Running an exported tower: :class:`OnnxEncoder` on ONNX Runtime (CPU, QNN, OpenVINO EP, …) or
:class:`OpenVinoEncoder` on OpenVINO's own runtime; this is the part a server imports.

The graph encodes one image (or one video: t frames) per run; a call with several images runs
them one by one and concatenates the rows, which is the same function (attention never crosses an
image).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.onnx_encoder.meta import INPUT_NAMES, META_NAME, OUTPUT_NAME, EncoderMeta


class ProviderNotAvailableError(ValueError):
    """A requested ONNX Runtime execution provider is not in the installed build."""


class OnnxEncoder:
    """The exported tower in an ONNX Runtime session: ``encoder(pixel_values, grid_thw)``.

    ``providers`` are execution-provider names (``"CPUExecutionProvider"`` or short ``"CPU"``,
    ``"QNN"``, ``"OpenVINO"`` …), checked against ``onnxruntime.get_available_providers()``;
    ``provider_options`` one dict per provider (QNN's ``backend_path``, OpenVINO's
    ``device_type``). The default is the CPU provider alone: NPU providers need options to be
    useful, and the Azure one is not a local unit. Threads are set on purpose — the encoder shares
    the machine with preprocessing workers and the engine: ``intra_op_threads`` for one operator,
    one inter-op thread (the graph is a chain), and no spin-waiting between runs.
    """

    def __init__(self, path: Path, providers: Sequence[str] | None = None,
                 provider_options: Sequence[dict[str, Any]] | None = None,
                 intra_op_threads: int = 1) -> None:
        import onnxruntime as ort

        if intra_op_threads < 1:
            raise ValueError("intra_op_threads must be >= 1")
        self.providers = resolve_providers(providers)
        if provider_options is not None and len(provider_options) != len(self.providers):
            raise ValueError(f"provider_options has {len(provider_options)} entries for "
                             f"{len(self.providers)} provider(s)")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(path), opts, providers=self.providers,
            provider_options=list(provider_options) if provider_options is not None else None)
        self.patch_dim = int(self.session.get_inputs()[0].shape[1])
        rows = self.session.get_inputs()[1].shape[0]
        # a graph with a fixed number of grid rows (1: this exporter's) is run image by image
        self.images_per_run: int | None = rows if isinstance(rows, int) else None
        meta_file = Path(path).with_name(META_NAME)
        self.meta = EncoderMeta.read(meta_file) if meta_file.exists() else None
        self.merge_size = self.meta.merge_size if self.meta else 2

    def __call__(self, pixel_values: np.ndarray, grid_thw: np.ndarray) -> np.ndarray:
        """``image_embeds`` (Σ t·h·w / merge², hidden) for the images in one call."""
        pv = np.ascontiguousarray(pixel_values, dtype=np.float32)
        grid = np.ascontiguousarray(grid_thw, dtype=np.int64).reshape(-1, 3)
        if pv.ndim != 2 or pv.shape[1] != self.patch_dim:
            raise ValueError(f"pixel_values must be (patches, {self.patch_dim}), got {pv.shape}")
        if (grid < 1).any() or (grid[:, 1:] % self.merge_size).any():
            raise ValueError(f"grid_thw rows must be positive with h, w multiples of "
                             f"{self.merge_size}: {grid.tolist()}")
        if int(grid.prod(axis=1).sum()) != len(pv):
            raise ValueError(f"grid_thw {grid.tolist()} is {int(grid.prod(axis=1).sum())} patches, "
                             f"pixel_values has {len(pv)}")
        if self.images_per_run is None or len(grid) <= self.images_per_run:
            return self._run(pv, grid)
        # One run per image: attention stays within an image (its frames), so this is the same
        # function as one call over all of them, at Σ patches² instead of (Σ patches)².
        ends = np.cumsum(grid.prod(axis=1))
        return np.concatenate([self._run(pv[e - int(g.prod()):e], g[None])
                               for g, e in zip(grid, ends, strict=True)])

    def _run(self, pv: np.ndarray, grid: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.session.run([OUTPUT_NAME], {INPUT_NAMES[0]: pv, INPUT_NAMES[1]: grid})[0]
        return out


#: ``--encoder-provider openvino:DEVICE`` runs the same graph on OpenVINO's own runtime (the
#: ``openvino`` package), not on ONNX Runtime's OpenVINO execution provider (``OpenVINO``, the
#: separate ``onnxruntime-openvino`` build, which replaces the ``onnxruntime`` package)
OPENVINO_PREFIX = "openvino:"


def is_openvino(provider: str) -> bool:
    return provider.lower().startswith(OPENVINO_PREFIX)


class OpenVinoEncoder(OnnxEncoder):
    """The exported graph compiled by OpenVINO's runtime: ``encoder(pixel_values, grid_thw)``,
    the same interface and input checks as :class:`OnnxEncoder` (no ONNX Runtime session).

    OpenVINO reads ``encoder.onnx`` as it is (its ONNX frontend takes the TorchScript export's
    ``com.microsoft.MultiHeadAttention`` nodes). On a CPU with AMX or AVX-512 BF16 its default
    inference precision is **bfloat16** (matrix products in bf16 with float32 accumulation; the
    output is float32) — the dtype vLLM runs the tower in — which is where its speed over ONNX
    Runtime's float32 kernels comes from; ``properties`` may set ``INFERENCE_PRECISION_HINT``
    (``f32`` gives float32 results) or any other CPU property. Threads as for ONNX Runtime:
    ``intra_op_threads`` inference threads, one stream, latency hint.
    """

    def __init__(self, path: Path, device: str = "CPU", properties: dict[str, Any] | None = None,
                 intra_op_threads: int = 1) -> None:
        import openvino as ov

        if intra_op_threads < 1:
            raise ValueError("intra_op_threads must be >= 1")
        core = ov.Core()
        if device not in core.available_devices:
            raise ProviderNotAvailableError(
                f"OpenVINO device {device} not present; this openvino {ov.__version__} has: "
                f"{', '.join(core.available_devices)}")
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        if device == "CPU":
            config["INFERENCE_NUM_THREADS"] = intra_op_threads
        config.update(properties or {})
        self.compiled = core.compile_model(core.read_model(str(path)), device, config)
        self.request = self.compiled.create_infer_request()
        self.precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT")) \
            if device == "CPU" else "device default"
        self.providers = [f"{OPENVINO_PREFIX}{device}"]
        self.patch_dim = int(self.compiled.inputs[0].get_partial_shape()[1].get_length())
        self.images_per_run: int | None = 1
        meta_file = Path(path).with_name(META_NAME)
        self.meta = EncoderMeta.read(meta_file) if meta_file.exists() else None
        self.merge_size = self.meta.merge_size if self.meta else 2

    def _run(self, pv: np.ndarray, grid: np.ndarray) -> np.ndarray:
        out = self.request.infer({0: pv, 1: grid})[0]
        return np.array(out, dtype=np.float32)  # a copy: the request reuses its output buffer


def open_encoder(path: Path, provider: str = "CPU", provider_options: dict[str, Any] | None = None,
                 intra_op_threads: int = 1) -> OnnxEncoder:
    """The graph on ``provider``: an ONNX Runtime execution provider (``CPU``, ``QNN``, …) or
    ``openvino:DEVICE`` (OpenVINO's runtime; ``provider_options`` are its properties)."""
    if is_openvino(provider):
        return OpenVinoEncoder(path, provider[len(OPENVINO_PREFIX):] or "CPU", provider_options,
                               intra_op_threads)
    return OnnxEncoder(path, [provider], [dict(provider_options or {})],
                       intra_op_threads=intra_op_threads)


def resolve_openvino(provider: str) -> str:
    """``openvino:DEVICE`` with the device checked, or :class:`ProviderNotAvailableError`."""
    device = provider[len(OPENVINO_PREFIX):] or "CPU"
    if importlib.util.find_spec("openvino") is None:
        raise ProviderNotAvailableError(
            f"{provider} needs OpenVINO's runtime, the `openvino` package, which is not installed "
            "(`pip install 'edgeserve[openvino]'`)")
    import openvino as ov

    devices = ov.Core().available_devices
    if device not in devices:
        raise ProviderNotAvailableError(
            f"OpenVINO device {device} not present; this openvino {ov.__version__} has: "
            f"{', '.join(devices)}")
    return f"{OPENVINO_PREFIX}{device}"


def resolve_providers(providers: Sequence[str] | None) -> list[str]:
    """Full provider names, each installed, or :class:`ProviderNotAvailableError`
    (``openvino:DEVICE`` is checked against OpenVINO's runtime, see :func:`resolve_openvino`)."""
    if providers is not None and len(providers) == 1 and is_openvino(providers[0]):
        return [resolve_openvino(providers[0])]
    import onnxruntime as ort

    available = ort.get_available_providers()
    if providers is None:
        return ["CPUExecutionProvider"]
    names = [p if p.endswith("ExecutionProvider") else f"{p}ExecutionProvider" for p in providers]
    by_lower = {a.lower(): a for a in available}
    resolved = [by_lower.get(n.lower(), n) for n in names]
    missing = [n for n in resolved if n not in available]
    if missing or not resolved:
        raise ProviderNotAvailableError(
            f"ONNX Runtime provider(s) {', '.join(missing) or '(none given)'} not installed; "
            f"this onnxruntime {ort.__version__} has: {', '.join(available)}")
    return resolved
