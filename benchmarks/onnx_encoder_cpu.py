"""CPU-seconds per image: the exported vision tower on ONNX Runtime vs vLLM's own tower.

The encoder target is the ONNX encoder's CPU time per image at least 2× *lower* than the
engine's own vision tower. Both run here in one process, on the same weights (the model folder's
safetensors) and the same inputs, alternately (A B A B …) after a warm-up:

* **onnx** — ``MODEL/onnx/encoder.onnx`` in :class:`models.onnx_encoder.OnnxEncoder`, exactly as
  a preprocessing worker opens it (CPU provider, ``--threads`` intra-op threads, one inter-op);
* **vllm** — vLLM's ``Qwen2VisionTransformer`` (``vllm.model_executor.models.qwen2_vl``), the
  module its engine runs for an image, built with a one-process tensor-parallel group and loaded
  with vLLM's own weight loader, in the model's dtype (bfloat16 here, as ``vllm serve`` runs it),
  ``torch.set_num_threads(--threads)``, attention through vLLM's CPU path (SDPA per frame).

* **openvino** (``--openvino``, on by default when the ``openvino`` package is installed) — the
  same ``encoder.onnx`` compiled by OpenVINO's runtime (:class:`models.onnx_encoder.OpenVinoEncoder`,
  ``--encoder-provider openvino:CPU``), at its default CPU precision: bfloat16 where the CPU has
  AMX or AVX-512 BF16. Its error is printed against the float32 graph's output (``max|ov-onnx|``).

Inputs are photographs of the benchmark workloads (``1mp`` = 1280×800, ``12mp`` = 4000×3000,
edgeserve.bench.workload), preprocessed by :mod:`mm_preproc` at the model's pixel limit (the
full 1280-token budget for the tiny model: a 12 MP photo becomes 1288×966 pixels). CPU time is
``time.process_time()`` around one call. Printed per image size: grid, image tokens, median
CPU-s of each, the median of the per-pair ratios vllm / onnx with min and max (the target is
≥ 2), and the largest |difference| between the two outputs (vLLM computes in bfloat16, so
expect about 1e-2 of values around 0.3: a check that both are the same tower, not a tolerance).

    .venv/bin/python benchmarks/onnx_encoder_cpu.py --sizes 1mp,12mp --rounds 5

The rounds go A B C A B C … (onnx, vllm, openvino).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build_vllm_tower(model_dir: Path) -> tuple[Any, Any]:
    """vLLM's Qwen2-VL vision tower with the folder's weights: ``(module, vllm_config)``.

    The module's parallel linear layers need a (one-process) model-parallel group and a current
    vLLM config; after loading, each layer's quant method prepares its CPU GEMM, as vLLM's model
    loader does (``process_weights_after_loading``).
    """
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.models.qwen2_vl import Qwen2VisionTransformer

    cfg = AutoConfig.from_pretrained(model_dir)
    dtype = getattr(torch, str(getattr(cfg, "dtype", None) or cfg.torch_dtype).removeprefix("torch."))
    vllm_config = VllmConfig()
    init_file = Path(tempfile.mkdtemp()) / "dist_init"
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{init_file}")
        initialize_model_parallel(1, 1)
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            tower = Qwen2VisionTransformer(cfg.vision_config, norm_eps=1e-6, prefix="visual")
        finally:
            torch.set_default_dtype(default)
        weights = load_file(str(Path(model_dir) / "model.safetensors"))
        prefix = next(p for p in ("model.visual.", "visual.") if any(k.startswith(p) for k in weights))
        tower.load_weights((k.removeprefix(prefix), v) for k, v in weights.items()
                           if k.startswith(prefix))
        for module in tower.modules():
            method = getattr(module, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(module)
    return tower.eval(), vllm_config


def inputs_for(size: str, model_dir: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """``(pixel_values, grid_thw, label)`` of one workload photo at the model's pixel limits."""
    import mm_preproc
    from edgeserve.bench.workload import ImageFactory, WorkloadConfig

    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    data, _, _ = ImageFactory(WorkloadConfig(sizes=size)).make(0)
    r = mm_preproc.preprocess(data, min_pixels=pre.get("min_pixels"), max_pixels=pre.get("max_pixels"))
    label = f"{size} {r.source_width}x{r.source_height} -> {r.target_width}x{r.target_height}"
    return r.pixel_values, r.image_grid_thw.astype(np.int64), label


def cpu_s(fn: Any) -> tuple[float, Any]:
    c0 = time.process_time()
    out = fn()
    return time.process_time() - c0, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-qwen2-vl")
    p.add_argument("--encoder", type=Path, default=None, help="the export (default MODEL/onnx/)")
    p.add_argument("--sizes", default="1mp,12mp", help="workload image presets or WxH")
    p.add_argument("--rounds", type=int, default=5, help="timed A/B pairs per size, after a warm-up")
    p.add_argument("--threads", type=int, default=1, help="threads of each (intra-op / torch)")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    p.add_argument("--openvino", action=argparse.BooleanOptionalAction, default=None,
                   help="also time OpenVINO's runtime on the graph (default: when installed)")
    args = p.parse_args()
    if args.openvino is None:
        import importlib.util

        args.openvino = importlib.util.find_spec("openvino") is not None
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

    import torch
    from vllm.config import set_current_vllm_config

    from models.onnx_encoder import EncoderMeta, OnnxEncoder, OpenVinoEncoder

    torch.set_num_threads(args.threads)
    graph = (args.encoder or args.model / "onnx") / "encoder.onnx"
    onnx = OnnxEncoder(graph, intra_op_threads=args.threads)
    ov = OpenVinoEncoder(graph, intra_op_threads=args.threads) if args.openvino else None
    meta = EncoderMeta.read(graph)
    tower, vllm_config = build_vllm_tower(args.model)
    import onnxruntime
    import vllm

    print(f"model {args.model.name}; onnx: {graph} ({meta.exporter}, attention "
          f"{meta.attention or 'not recorded'}), onnxruntime {onnxruntime.__version__}, CPU "
          f"provider, {args.threads} intra-op thread(s); vllm {vllm.__version__} "
          f"Qwen2VisionTransformer, {tower.dtype}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}; median of {args.rounds} A/B pairs after a warm-up")
    if ov is not None:
        import openvino

        print(f"openvino: {openvino.__version__} runtime on the same graph, CPU, inference "
              f"precision {ov.precision}, {args.threads} thread(s)")
    header = (f"{'image':<36} {'grid':>12} {'tokens':>6} {'onnx CPU-s':>10} {'vllm CPU-s':>10} "
              f"{'vllm/onnx':>9} {'(min-max)':>12} {'max|diff|':>9}"
              + (f" {'ov CPU-s':>9} {'vllm/ov':>8} {'(min-max)':>12} {'max|ov-onnx|':>12}"
                 if ov is not None else ""))
    print(header)
    rows = []
    with set_current_vllm_config(vllm_config), torch.inference_mode():
        for size in args.sizes.split(","):
            pv, grid, label = inputs_for(size.strip(), args.model)
            pv_vllm, grid_vllm = torch.from_numpy(pv).to(tower.dtype), torch.from_numpy(grid)

            def run_onnx(pv: np.ndarray = pv, grid: np.ndarray = grid) -> np.ndarray:
                return onnx(pv, grid)

            def run_vllm(pv_t: Any = pv_vllm, grid_t: Any = grid_vllm) -> np.ndarray:
                return tower(pv_t, grid_t).float().numpy()

            def run_ov(pv: np.ndarray = pv, grid: np.ndarray = grid) -> np.ndarray:
                assert ov is not None
                return ov(pv, grid)

            got, want = run_onnx(), run_vllm()  # warm-up, and the agreement check
            got_ov = run_ov() if ov is not None else None
            pairs, ov_s = [], []
            for _ in range(args.rounds):
                pairs.append((cpu_s(run_onnx)[0], cpu_s(run_vllm)[0]))
                if ov is not None:
                    ov_s.append(cpu_s(run_ov)[0])
            ratios = [b / a for a, b in pairs]
            row = {"image": label, "grid_thw": grid.tolist()[0], "tokens": int(got.shape[0]),
                   "onnx_cpu_s": statistics.median(a for a, _ in pairs),
                   "vllm_cpu_s": statistics.median(b for _, b in pairs),
                   "ratio_vllm_over_onnx": statistics.median(ratios),
                   "ratio_min": min(ratios), "ratio_max": max(ratios),
                   "max_abs_diff": float(np.abs(got - want).max()),
                   "max_abs_value": float(np.abs(want).max())}
            if got_ov is not None:
                ov_ratios = [b / c for (_, b), c in zip(pairs, ov_s, strict=True)]
                row.update({"openvino_cpu_s": statistics.median(ov_s),
                            "ratio_vllm_over_openvino": statistics.median(ov_ratios),
                            "openvino_ratio_min": min(ov_ratios),
                            "openvino_ratio_max": max(ov_ratios),
                            "openvino_max_abs_diff_vs_onnx_f32": float(np.abs(got_ov - got).max()),
                            "openvino_max_abs_diff_vs_vllm": float(np.abs(got_ov - want).max()),
                            "onnx_f32_max_abs_value": float(np.abs(got).max())})
            rows.append(row)
            print(f"{label:<36} {row['grid_thw']!s:>12} {row['tokens']:>6} "
                  f"{row['onnx_cpu_s']:>10.3f} {row['vllm_cpu_s']:>10.3f} "
                  f"{row['ratio_vllm_over_onnx']:>8.2f}x "
                  f"{row['ratio_min']:>5.2f}-{row['ratio_max']:.2f}x {row['max_abs_diff']:>9.2e}"
                  + (f" {row['openvino_cpu_s']:>9.3f} {row['ratio_vllm_over_openvino']:>7.2f}x "
                     f"{row['openvino_ratio_min']:>5.2f}-{row['openvino_ratio_max']:.2f}x "
                     f"{row['openvino_max_abs_diff_vs_onnx_f32']:>12.2e}" if got_ov is not None else ""),
                  flush=True)
    met = all(r["ratio_vllm_over_onnx"] >= 2.0 for r in rows)
    print(f"target (onnx at least 2x lower CPU-s than vllm's tower): {'met' if met else 'NOT met'}")
    if ov is not None:
        met_ov = all(r["ratio_vllm_over_openvino"] >= 2.0 for r in rows)
        print(f"target with openvino:CPU ({ov.precision}): {'met' if met_ov else 'NOT met'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"threads": args.threads, "load_average":
                                        os.getloadavg()[0], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
