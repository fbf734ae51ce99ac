"""The Qwen2-VL vision tower as one ONNX graph, checked against transformers' own tower.

A vision-language request costs two very different computations: the vision tower turns an
image's 14×14 patches into image tokens (a ViT: attention over all patches of a frame, then a 2×2
merge into the language model's width), and the language model decodes. On an edge device the
first belongs on an NPU or a CPU of its own, the second on vLLM. The split point is the tower's
output: vLLM accepts ``image_embeds`` (tokens, LM hidden) with the ``image_grid_thw`` that
produced them in place of ``pixel_values`` — exactly what
``Qwen2VLForConditionalGeneration.model.visual(pixel_values, grid_thw=G)`` returns. This module
writes that tower as ``encoder.onnx`` for ONNX Runtime, whose execution providers (CPU, QNN,
OpenVINO, VitisAI, CoreML, …) are how a user picks the unit that runs it::

    pixel_values   float32 (num_patches, C·T·P·P)   (n, 1176) for Qwen2-VL, as mm_preproc makes it
    image_grid_thw int64   (1, 3)                   the image's (t, h, w) patch grid
    image_embeds   float32 (n / merge², hidden)     hidden = the language model's width

The number of patches is dynamic: one graph serves every image size. One run encodes one image
(or one video: t frames); :class:`OnnxEncoder` runs a call with several images image by image
and concatenates the rows, which is the same function (attention never crosses an image). The
rotary position ids are derived from ``image_grid_thw`` *inside* the graph, so a caller passes
nothing but the two arrays above.

How the tower is rewritten for export (:func:`_graph_module`), and why:

* **Grid → positions without Python loops.** transformers loops over ``grid_thw.tolist()``
  (``get_vision_position_ids``); a traced loop over concrete values bakes one image size into the
  graph — every other size is then silently wrong (the rknn-llm exports that baked
  ``rotary_pos_emb`` in as constants). Here each patch index ``p`` finds its (row, column) in the
  merge-block-major layout by integer arithmetic on its index within the frame ``f``:
  ``block = f // m², hpos = (block // (w/m))·m + (f % m²) // m`` and so on.
* **Frames as a batch, not a mask.** The tower attends within each frame only. transformers
  splits q/k/v by ``cu_seqlens.tolist()`` (a Python list) or hands ``cu_seqlens`` to
  FlashAttention; exporters stumble on both (``cumsum`` yielding int64 where a Slice wanted int32,
  transformers PR 34852). With one image per run every frame has the same h·w patches, so
  q/k/v are reshaped to (t, h·w, heads·head_dim) and each frame is one batch entry of an
  attention with **no mask at all**. (The first version of this graph took any number of
  images and added a 0 / −inf segment mask to (Σ patches)² scores: 0.42 CPU-s for a 1280-token
  image against 0.22 now, and quadratic in the whole batch.)
* **ONNX Runtime's fused attention.** The TorchScript exporter writes each block's attention as
  one ``com.microsoft.MultiHeadAttention`` node (``_FrameAttention.symbolic``); its CPU kernel
  is a flash attention (MLAS): blocks of scores in cache, never the (patches × patches) matrix
  — 105 MB per head for a 1280-token image otherwise. The dynamo exporter traces the eager
  forward instead (MatMul, Softmax, MatMul per frame: standard ops for providers without the
  contrib op). Patch embed (a Conv3d whose kernel is its stride) is one MatMul of the flattened
  patches; norms, rotary tables, MLPs and the merger are transformers' own modules, float32.

Measured (``benchmarks/onnx_encoder_cpu.py``, one thread, 2-core AMD EPYC with AVX-512): for a
1280-token image about 82 % of the graph's time is the two attention nodes, at roughly 70 % of
the core's float32 FMA peak (head_dim 32, 5 000 patches: 13 GFLOP of attention); ONNX
Runtime's CPU provider has no bfloat16 or float16 GEMM on x86 (a float16 MultiHeadAttention ran
no faster, the opset-23 ``Attention`` op slower), so this is near what float32 allows.

The exporter is ``torch.onnx.export``: the TorchScript one (``dynamo=False`` with
``dynamic_axes``) by default, or the ``torch.export``-based one (``dynamo=True`` with
``dynamic_shapes``). Both export this module cleanly and give the same figures; on the tiny model
the TorchScript one takes about 1 s, the dynamo one 7–9 s. Traps met on the way:

* the legacy TorchScript exporter still needs the ``onnx`` package ("Module onnx is not
  installed!"); the dynamo one needs ``onnx`` and ``onnxscript``;
* the dynamo exporter implements opset 18 and up (a lower request is converted after export),
  and warns about ``dynamic_axes`` — hence opset 18 and ``dynamic_shapes`` on that path;
* in transformers 5 the tower returns a model output: the merged image embeddings are its
  ``pooler_output``; ``last_hidden_state`` is the unmerged (patches, embed_dim) sequence;
* the example input is a two-frame 4×6 grid, so that no grid value is a special case (0 or 1)
  an exporter could fold into a constant;
* the contrib op needs ``custom_opsets={"com.microsoft": 1}`` on the TorchScript path.

Every export is checked before its metadata is written: the graph runs in ONNX Runtime on images
of 224×224, 448×336 and 644×476 pixels and on a two-image call (run image by image), preprocessed by
:mod:`mm_preproc`, and is compared with transformers' tower. ``encoder.json`` is written *last*,
next to the graph, with those figures — a folder with an ``encoder.json`` holds a checked graph
(the CLI judges the figures), and a server can check with :meth:`EncoderMeta.mismatches` that the
graph belongs to its model.

Not covered: the Qwen2.5-VL (window
attention, ``fullatt_block_indexes``) and Qwen3-VL (deepstack) towers; full-size towers above
2 GiB of float32 weights, for which the exporters write external data files beside the graph
(not exercised here); quantised or lower-precision graphs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

GRAPH_NAME = "encoder.onnx"
META_NAME = "encoder.json"
INPUT_NAMES = ("pixel_values", "image_grid_thw")
OUTPUT_NAME = "image_embeds"
DEFAULT_OPSET = 18  # the dynamo exporter's lowest; LayerNormalization is one op from 17 on
SUPPORTED_MODEL_TYPES = ("qwen2_vl",)
CONTRIB_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators (MultiHeadAttention)
# Images (width, height) the export is checked on; each inner tuple is one call.
CHECK_IMAGES: tuple[tuple[tuple[int, int], ...], ...] = (
    ((224, 224),),
    ((448, 336),),
    ((644, 476),),
    ((224, 224), (448, 336)),
)


class Exporter(StrEnum):
    """Which ``torch.onnx.export`` path writes the graph."""

    TORCHSCRIPT = "torchscript"  # dynamo=False, dynamic_axes; needs `onnx`
    DYNAMO = "dynamo"  # dynamo=True (torch.export); needs `onnx` and `onnxscript`

    @property
    def packages(self) -> tuple[str, ...]:
        """The Python packages ``torch.onnx.export`` needs on this path."""
        return ("onnx",) if self is Exporter.TORCHSCRIPT else ("onnx", "onnxscript")

    @property
    def attention(self) -> str:
        """How the graph this path writes computes attention (recorded in ``encoder.json``)."""
        if self is Exporter.TORCHSCRIPT:
            return f"{CONTRIB_DOMAIN}.MultiHeadAttention per frame, no mask"
        return "MatMul-Softmax-MatMul per frame, no mask"

    @property
    def label(self) -> str:
        how = "TorchScript, dynamo=False" if self is Exporter.TORCHSCRIPT else "torch.export, dynamo=True"
        return f"torch.onnx.export ({how})"


class NotQwen2VLError(ValueError):
    """The folder is not a Qwen2-VL model this export handles."""


class ProviderNotAvailableError(ValueError):
    """A requested ONNX Runtime execution provider is not in the installed build."""


@dataclass(frozen=True, slots=True)
class Check:
    """One verification call: the grids fed together and the largest difference seen."""

    grid_thw: list[list[int]]
    tokens: int
    max_abs_diff: float
    max_abs_ref: float  # the scale the difference is to be read against


@dataclass(frozen=True, slots=True)
class EncoderMeta:
    """What ``encoder.json`` says about a graph: its model, geometry, interface and checks."""

    model_id: str
    architecture: str
    model_type: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    in_channels: int
    embed_dim: int
    hidden_size: int
    vision_config_sha256: str
    weights_fingerprint: str
    opset: int
    exporter: str
    torch_version: str
    transformers_version: str
    export_s: float
    graph_bytes: int
    max_abs_diff: float
    checks: list[Check] = field(default_factory=list)
    attention: str = ""  # how the graph attends (Exporter.attention); "" in older exports
    inputs: tuple[str, ...] = INPUT_NAMES
    output: str = OUTPUT_NAME
    graph: str = GRAPH_NAME

    @property
    def patch_dim(self) -> int:
        """Width of one ``pixel_values`` row: C·T·P·P (1176 for Qwen2-VL)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    def failed(self, tolerance: float) -> list[Check]:
        """Checks whose max abs diff exceeds ``tolerance`` × the largest |embedding| in them."""
        return [c for c in self.checks if c.max_abs_diff > tolerance * c.max_abs_ref]

    def mismatches(self, model_dir: Path) -> list[str]:
        """Reasons this graph is not ``model_dir``'s tower (empty when it is)."""
        cfg = read_model_config(model_dir)
        found = {"architecture": _architecture(cfg), "vision_config_sha256": _vision_sha(cfg),
                 "weights_fingerprint": weights_fingerprint(Path(model_dir))}
        return [f"{k}: graph has {getattr(self, k)!r}, model has {v!r}"
                for k, v in found.items() if getattr(self, k) != v]

    def write(self, out_dir: Path) -> Path:
        path = Path(out_dir) / META_NAME
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> EncoderMeta:
        """Read ``encoder.json`` (``path`` may be the file, the graph or their folder)."""
        path = Path(path)
        path = path if path.suffix == ".json" else (path.parent if path.is_file() else path) / META_NAME
        raw = json.loads(path.read_text())
        raw["checks"] = [Check(**c) for c in raw.get("checks", [])]
        raw["inputs"] = tuple(raw.get("inputs", INPUT_NAMES))
        return cls(**raw)


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """The folder's ``config.json``, or :class:`NotQwen2VLError` saying why it is not one."""
    cfg_file = Path(model_dir) / "config.json"
    if not cfg_file.is_file():
        raise NotQwen2VLError(f"no config.json in {model_dir}: not a model folder")
    try:
        cfg: dict[str, Any] = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise NotQwen2VLError(f"{cfg_file} is not valid JSON ({e})") from None
    kind = cfg.get("model_type")
    if kind not in SUPPORTED_MODEL_TYPES or "vision_config" not in cfg:
        raise NotQwen2VLError(f"{model_dir} is a {kind or 'unknown'} model, not Qwen2-VL "
                              "(only Qwen2-VL's vision tower is exported)")
    return cfg


def weights_fingerprint(model_dir: Path) -> str:
    """A cheap identity of the weights: name, size, first and last MiB of each safetensors file.

    Cheap enough for a server to check at start-up on multi-GB checkpoints; it tells apart two
    random-weight builds of one config, which a config hash cannot.
    """
    h = hashlib.sha256()
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}:".encode())
        with f.open("rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def export_encoder(model_dir: Path, out_dir: Path, *, exporter: Exporter | str = Exporter.TORCHSCRIPT,
                   opset: int = DEFAULT_OPSET) -> Path:
    """Write ``model_dir``'s vision tower to ``out_dir/encoder.onnx``, verify it, then write
    ``encoder.json``. Returns the graph's path.

    Raises :class:`NotQwen2VLError` for a folder that is not a Qwen2-VL model and
    :class:`ImportError` when the exporter's packages are not installed.
    """
    model_dir, out_dir, exporter = Path(model_dir), Path(out_dir), Exporter(exporter)
    cfg = read_model_config(model_dir)
    missing = [p for p in exporter.packages if importlib.util.find_spec(p) is None]
    if missing:
        raise ImportError(f"the {exporter.value} exporter needs {' and '.join(missing)} "
                          f"(pip install {' '.join(missing)})")
    import torch
    import transformers

    visual = load_reference_tower(model_dir)
    vc = visual.config
    out_dir.mkdir(parents=True, exist_ok=True)
    graph = out_dir / GRAPH_NAME
    for stale in (out_dir / META_NAME, graph, _external_data(graph)):  # no stale "verified"
        stale.unlink(missing_ok=True)

    example_grid = torch.tensor([[2, 4, 6]])  # no grid value special (0 or 1) to fold away
    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    example = (torch.zeros(int(example_grid.prod()), patch_dim), example_grid)
    t0 = time.perf_counter()
    _torch_export(_graph_module(visual), example, graph, exporter, opset)
    export_s = time.perf_counter() - t0
    checks = verify(graph, visual, _model_pixel_limits(model_dir))

    meta = EncoderMeta(
        model_id=str(cfg.get("_name_or_path") or model_dir.name),
        architecture=_architecture(cfg), model_type=cfg["model_type"],
        patch_size=vc.patch_size, merge_size=vc.spatial_merge_size,
        temporal_patch_size=vc.temporal_patch_size, in_channels=vc.in_channels,
        embed_dim=vc.embed_dim, hidden_size=vc.hidden_size,
        vision_config_sha256=_vision_sha(cfg), weights_fingerprint=weights_fingerprint(model_dir),
        opset=opset, exporter=exporter.label,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
        export_s=round(export_s, 3), graph_bytes=_graph_bytes(graph),
        max_abs_diff=max(c.max_abs_diff for c in checks), checks=checks,
        attention=exporter.attention,
    )
    meta.write(out_dir)
    return graph


def _torch_export(module: Any, example: tuple[Any, Any], graph: Path, exporter: Exporter,
                  opset: int) -> None:
    """``torch.onnx.export`` with the number of patches and of images left dynamic."""
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        if exporter is Exporter.DYNAMO:
            dim = torch.export.Dim
            torch.onnx.export(module, example, str(graph), dynamo=True, opset_version=opset,
                              verbose=False, input_names=list(INPUT_NAMES),
                              output_names=[OUTPUT_NAME],
                              dynamic_shapes={"pixel_values": {0: dim("num_patches")},
                                              "image_grid_thw": None})
        else:
            # It warns that it is the legacy exporter; it is also the one needing fewest packages.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(module, example, str(graph), dynamo=False, opset_version=opset,
                              input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                              dynamic_axes={"pixel_values": {0: "num_patches"},
                                            OUTPUT_NAME: {0: "num_tokens"}},
                              custom_opsets={CONTRIB_DOMAIN: 1})


def load_reference_tower(model_dir: Path) -> Any:
    """transformers' own tower, float32, eager attention: the function the graph must equal."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    read_model_config(model_dir)
    model = Qwen2VLForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    return model.model.visual.eval()


def reference_embeds(visual: Any, pixel_values: np.ndarray, grid_thw: np.ndarray) -> np.ndarray:
    """``visual(pixel_values, grid_thw=G)``'s merged output, (tokens, hidden) float32."""
    import torch

    with torch.no_grad():
        out = visual(torch.from_numpy(pixel_values), grid_thw=torch.from_numpy(grid_thw))
    out = getattr(out, "pooler_output", out)  # transformers 5 returns a model output
    return np.asarray(out.numpy(), dtype=np.float32)


def check_inputs(images: Sequence[tuple[int, int]], *, min_pixels: int = 56 * 56,
                 max_pixels: int = 1280 * 28 * 28, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(pixel_values, image_grid_thw)`` for synthetic images of the given (width, height), made
    by :func:`mm_preproc.preprocess` as the server makes them."""
    import mm_preproc

    rng = np.random.default_rng(seed)
    results = [mm_preproc.preprocess(rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                                     min_pixels=min_pixels, max_pixels=max_pixels)
               for w, h in images]
    return (np.concatenate([r.pixel_values for r in results]),
            np.concatenate([r.image_grid_thw for r in results]).astype(np.int64))


def verify(graph: Path, visual: Any, pixel_limits: tuple[int, int] = (56 * 56, 1280 * 28 * 28),
           calls: Sequence[Sequence[tuple[int, int]]] = CHECK_IMAGES) -> list[Check]:
    """Run ``graph`` on each call's images and compare with transformers' tower."""
    encoder = OnnxEncoder(graph)
    checks = []
    for images in calls:
        pv, grid = check_inputs(images, min_pixels=pixel_limits[0], max_pixels=pixel_limits[1])
        got, want = encoder(pv, grid), reference_embeds(visual, pv, grid)
        if got.shape != want.shape:
            raise AssertionError(f"graph gave {got.shape}, transformers {want.shape} for {grid}")
        checks.append(Check(grid.tolist(), len(want), float(np.abs(got - want).max()),
                            float(np.abs(want).max())))
    return checks


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


def _graph_module(visual: Any) -> Any:
    """Wrap transformers' tower in a module whose forward exports with a dynamic number of patches
    for one image (or one video) per call: ``image_grid_thw`` is its single (t, h, w) row."""
    import torch
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

    m = int(visual.spatial_merge_size)

    def positions(grid_thw: torch.Tensor, num_patches: int) -> torch.Tensor:
        """Per patch: its (h, w) rotary position, merge-block-major as transformers lays it out
        (every frame of a video repeats the positions of the first)."""
        w = grid_thw[0, 2].to(torch.int64)
        frame = grid_thw[0, 1].to(torch.int64) * w
        f = torch.arange(num_patches, dtype=torch.int64) % frame  # index within its frame
        block, within = f // (m * m), f % (m * m)
        blocks_per_row = w // m
        hpos = (block // blocks_per_row) * m + within // m
        wpos = (block % blocks_per_row) * m + within % m
        return torch.stack([hpos, wpos], dim=-1)

    class VisionGraph(torch.nn.Module):
        patch_weight: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.visual = visual
            # Conv3d with kernel = stride = the patch is a matmul of the flattened patch rows; as
            # one (1176 × embed) MatMul it is ~15 % of the graph's time faster than ORT's Conv.
            weight = visual.patch_embed.proj.weight
            self.register_buffer("patch_weight", weight.reshape(weight.shape[0], -1).t().contiguous())

        def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
            v = self.visual
            frames: Any = image_grid_thw[0, 0]  # a traced size: dynamic in the graph
            x = torch.matmul(pixel_values.to(self.patch_weight.dtype), self.patch_weight)
            cos, sin = v.rotary_pos_emb(x, positions(image_grid_thw, pixel_values.shape[0]))
            for blk in v.blocks:
                a = blk.attn
                qkv = a.qkv(blk.norm1(x)).reshape(-1, 3, a.num_heads, a.head_dim).permute(1, 0, 2, 3)
                q, k = apply_rotary_pos_emb_vision(qkv[0], qkv[1], cos, sin)
                # (frames, patches per frame, heads · head_dim): each frame one attention batch
                q, k, val = (z.reshape(frames, -1, a.dim) for z in (q, k, qkv[2]))
                o = _FrameAttention.apply(q, k, val, a.num_heads, float(a.scaling))
                x = x + a.proj(o.reshape(-1, a.dim))
                x = x + blk.mlp(blk.norm2(x))
            merged: torch.Tensor = v.merger(x)
            return merged

    return VisionGraph().eval()


def _frame_attention_class() -> Any:
    """``softmax(q·kᵀ·scale)·v`` per frame and head, exported by the TorchScript exporter as ONNX
    Runtime's fused ``com.microsoft.MultiHeadAttention`` (flash attention on its CPU provider: no
    (patches × patches) score matrix in memory); the dynamo exporter traces the eager forward."""
    import torch

    class FrameAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int,
                    scale: float) -> torch.Tensor:
            frames, n, width = q.shape
            heads = [z.reshape(frames, n, num_heads, width // num_heads).transpose(1, 2)
                     for z in (q, k, v)]
            scores = torch.matmul(heads[0], heads[1].transpose(-1, -2)) * scale
            o = torch.matmul(torch.softmax(scores, dim=-1), heads[2])
            return o.transpose(1, 2).reshape(frames, n, width)

        @staticmethod
        def symbolic(g: Any, q: Any, k: Any, v: Any, num_heads: int, scale: float) -> Any:
            return g.op(f"{CONTRIB_DOMAIN}::MultiHeadAttention", q, k, v,
                        num_heads_i=num_heads, scale_f=scale)

    return FrameAttention


class _LazyFrameAttention:
    """Defers importing torch until the graph is built (the runtime imports this module too)."""

    _cls: Any = None

    def apply(self, *args: Any) -> Any:
        if self._cls is None:
            type(self)._cls = _frame_attention_class()
        return self._cls.apply(*args)


_FrameAttention = _LazyFrameAttention()


def _architecture(cfg: dict[str, Any]) -> str:
    return ",".join(cfg.get("architectures") or ["?"])


def _vision_sha(cfg: dict[str, Any]) -> str:
    payload = json.dumps(cfg.get("vision_config", {}), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _model_pixel_limits(model_dir: Path) -> tuple[int, int]:
    pre = Path(model_dir) / "preprocessor_config.json"
    raw = json.loads(pre.read_text()) if pre.exists() else {}
    return int(raw.get("min_pixels", 56 * 56)), int(raw.get("max_pixels", 1280 * 28 * 28))


def _external_data(graph: Path) -> Path:
    """Where the dynamo exporter puts the weights (always, even for a small graph)."""
    return graph.with_name(graph.name + ".data")


def _graph_bytes(graph: Path) -> int:
    """The graph and its external-data file, if any."""
    return sum(f.stat().st_size for f in (graph, _external_data(graph)) if f.exists())
