"""``edgeserve serve``: flags → :class:`~edgeserve.config.ServeConfig` → the server.

Every flag defaults to "not given" so that a ``--config`` file's value wins over the built-in
default and a flag given on the command line wins over both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from edgeserve.config import (
    DEFAULT_MODEL_DIR,
    ConfigError,
    EngineOptions,
    ServeConfig,
    default_workers,
)
from edgeserve.console import say

# flag dest → ServeConfig field (engine options as "engine.<field>")
_FIELDS = {
    "model": "model", "served_model_name": "served_model_name", "host": "host", "port": "port",
    "mode": "mode", "workers": "workers", "max_pending": "max_pending",
    "max_inflight": "max_inflight", "max_engine_queue": "max_engine_queue",
    "retry_after": "retry_after_s",
    "allowed_media_dir": "allowed_media_dir", "allow_http_media": "allow_http_media",
    "http_timeout": "http_timeout_s", "max_image_bytes": "max_image_bytes",
    "max_image_pixels": "max_image_pixels", "max_images_per_request": "max_images_per_request",
    "min_pixels": "min_pixels", "max_pixels": "max_pixels", "fast_decode": "fast_decode",
    "preproc_backend": "preproc_backend",
    "encoder": "encoder", "encoder_path": "encoder_path", "encoder_provider": "encoder_provider",
    "encoder_threads": "encoder_threads",
    "trace": "trace", "engine_log": "engine_log", "verbose": "verbose",
    "sample_interval": "sample_interval_s", "drain_timeout": "drain_timeout_s",
    "warmup": "warmup",
    "engine_core_placement": "engine_core_placement", "engine_wait": "engine_wait",
    "frontend_torch_threads": "frontend_torch_threads",
    "frontend_render_threads": "frontend_render_threads",
    "max_model_len": "engine.max_model_len", "max_num_seqs": "engine.max_num_seqs",
    "gpu_memory_utilization": "engine.gpu_memory_utilization", "dtype": "engine.dtype",
    "kv_cache_memory_bytes": "engine.kv_cache_memory_bytes",
    "enforce_eager": "engine.enforce_eager", "seed": "engine.seed",
    "enable_prefix_caching": "engine.enable_prefix_caching",
    "replicas": "replicas", "tensor_parallel_size": "engine.tensor_parallel_size",
}


def _d(name: str) -> object:
    """A ServeConfig default, so that --help cannot drift from the code."""
    f = next(f for f in dataclasses.fields(ServeConfig) if f.name == name)
    return f.default if f.default is not dataclasses.MISSING else "?"


def _e(name: str) -> object:
    f = next(f for f in dataclasses.fields(EngineOptions) if f.name == name)
    return f.default


def add_parser(subparsers: argparse._SubParsersAction, help_: str) -> None:
    p = subparsers.add_parser(
        "serve", help=help_,
        description="Run the OpenAI-compatible VLM server. Image preprocessing runs in worker "
        "processes apart from the vLLM engine (--mode split) or on the frontend's event loop "
        "(--mode inline, for comparison). Endpoints: POST /v1/chat/completions, GET /v1/models, "
        "/health, /metrics (Prometheus), /v1/events (SSE stream of request records and "
        "resource samples).",
        argument_default=None,
    )
    a = p.add_argument
    a("--config", metavar="FILE", help="YAML or JSON file with ServeConfig fields; flags override it")
    g = p.add_argument_group("model and network")
    g.add_argument("--model", metavar="DIR", help=f"model directory (default: {DEFAULT_MODEL_DIR})")
    g.add_argument("--served-model-name", metavar="NAME",
                   help="name clients use in 'model' (default: the model path)")
    g.add_argument("--host", help=f"listen address (default: {_d('host')})")
    g.add_argument("--port", type=int, help=f"listen port (default: {_d('port')})")
    g = p.add_argument_group("preprocessing")
    g.add_argument("--mode", choices=["split", "inline"],
                   help="split: worker processes; inline: on the frontend's event loop "
                   "(default: split)")
    g.add_argument("--workers", type=int, metavar="N",
                   help=f"preprocessing worker processes (default: cores - 2, at least 1, "
                   f"here {default_workers()}; with the encoder on the CPU (--encoder onnx, or "
                   f"auto where it chooses onnx), which moves the "
                   f"vision tower out of the engine into the workers: cores - 1, at least 2, "
                   f"here {default_workers(encoder_on_cpu=True)})")
    g.add_argument("--min-pixels", type=int,
                   help="smallest resized image area (default: the model's preprocessor config)")
    g.add_argument("--max-pixels", type=int,
                   help="largest resized image area; one image token per 28x28 pixels "
                   "(32x32 for Qwen3-VL and Qwen3.5; default: the model's preprocessor config)")
    g.add_argument("--preproc-backend", choices=["auto", "pillow", "opencv"],
                   help=f"mm_preproc decode/resize backend (default: {_d('preproc_backend')})")
    g.add_argument("--no-fast-decode", dest="fast_decode", action="store_const", const=False,
                   help="decode JPEGs at full size instead of at 1/2..1/8 scale when the target "
                   "is small enough")
    g = p.add_argument_group("vision encoder")
    g.add_argument("--encoder", choices=["auto", "none", "onnx"],
                   help="none: vLLM runs the vision tower inside the engine; onnx: the exported "
                   "tower runs on ONNX Runtime in each preprocessing worker right after patchify "
                   "(in the frontend with --mode inline) and vLLM receives image embeddings; "
                   "auto: onnx on vLLM's CPU build in split mode where the model has an export "
                   "(MODEL/onnx, `edgeserve models export-encoder`), none on a GPU, in inline "
                   "mode or without an export; the start-up lines say which and why "
                   "(default: auto)")
    g.add_argument("--encoder-path", metavar="DIR",
                   help="folder with encoder.onnx and encoder.json, written by `edgeserve models "
                   "export-encoder` (default: MODEL/onnx)")
    g.add_argument("--encoder-provider", metavar="NAME",
                   help="ONNX Runtime execution provider: CPU, or CUDA, OpenVINO, QNN, CoreML … "
                   "where that onnxruntime build is installed; or openvino:CPU (openvino:GPU, "
                   "openvino:NPU) for OpenVINO's own runtime on the same graph (the openvino "
                   "package: bfloat16 on CPUs with AMX or AVX-512 BF16); its options go in the "
                   f"--config file as encoder_provider_options (default: {_d('encoder_provider')})")
    g.add_argument("--encoder-threads", type=int, metavar="N",
                   help="intra-op threads of each process's ONNX Runtime session "
                   f"(default: {_d('encoder_threads')})")
    g = p.add_argument_group("admission and limits")
    g.add_argument("--max-pending", type=int, metavar="N",
                   help="requests waiting for a preprocessing worker before 429 "
                   f"(default: {_d('max_pending')})")
    g.add_argument("--max-inflight", type=int, metavar="N",
                   help=f"admitted requests in total before 429 (default: {_d('max_inflight')})")
    g.add_argument("--max-engine-queue", type=int, metavar="N",
                   help="requests between preprocessing and their first token; more wait in "
                   "front of preprocessing holding only their encoded bytes, which bounds the "
                   "memory of a backlog (default: 2 x --max-num-seqs)")
    g.add_argument("--retry-after", type=int, metavar="S",
                   help=f"Retry-After seconds sent with 429/503 (default: {_d('retry_after_s')})")
    g.add_argument("--max-image-bytes", type=int, metavar="N",
                   help=f"largest encoded image in bytes (default: {_d('max_image_bytes')})")
    g.add_argument("--max-image-pixels", type=int, metavar="N",
                   help="largest source image in pixels, refused before decoding "
                   f"(default: {_d('max_image_pixels')})")
    g.add_argument("--max-images-per-request", type=int, metavar="N",
                   help=f"default: {_d('max_images_per_request')}")
    g = p.add_argument_group("media sources")
    g.add_argument("--allowed-media-dir", metavar="DIR",
                   help="allow file:// image URLs inside DIR (default: none allowed)")
    g.add_argument("--allow-http-media", action="store_const", const=True,
                   help="allow http(s) image URLs, fetched with --http-timeout and "
                   "--max-image-bytes limits (default: off)")
    g.add_argument("--http-timeout", type=float, metavar="S",
                   help=f"default: {_d('http_timeout_s')}")
    g = p.add_argument_group("observability and lifecycle")
    g.add_argument("--trace", metavar="FILE",
                   help="write request records and resource samples as JSON Lines")
    g.add_argument("--engine-log", metavar="FILE",
                   help="where vLLM's own output goes (its start-up log, warnings, tracebacks); "
                   "the terminal shows edgeserve's lines only (default: "
                   "$TMPDIR/edgeserve-serve-PORT-PID.log, named at start)")
    g.add_argument("--verbose", "-v", action="store_const", const=True,
                   help="show vLLM's output on the terminal instead of in --engine-log")
    g.add_argument("--sample-interval", type=float, metavar="S",
                   help=f"resource sample period (default: {_d('sample_interval_s')})")
    g.add_argument("--no-warmup", dest="warmup", action="store_const", const=False,
                   help="report ready as soon as the engine is up, without first running image "
                   "requests of the largest and the common sizes through the workers and the "
                   "engine (by default they run before /health answers, so that the first user "
                   "request pays no cold start; the start-up lines say how long they took)")
    g.add_argument("--drain-timeout", type=float, metavar="S",
                   help="on SIGTERM, wait this long for in-flight requests "
                   f"(default: {_d('drain_timeout_s')})")
    g.add_argument("--engine-core-placement", choices=["with-worker", "any"],
                   help="with-worker: once the engine is up, pin vLLM's EngineCore process to the "
                   "cores of its model worker where vLLM bound that worker to fewer cores (its "
                   "CPU build does), so that its spin-wait during a step leaves the preprocessing "
                   "workers' cores alone; any: leave vLLM's placement "
                   f"(default: {_d('engine_core_placement')})")
    g.add_argument("--engine-wait", choices=["yield", "sleep"],
                   help="how vLLM's EngineCore and model worker wait for each other's next "
                   "message between steps: yield (vLLM's own spin, sched_yield in a loop) or "
                   "sleep (the same loop with 50 us sleeps, which no other task on the core can "
                   "starve; edgeserve.engine_wait) (default: chosen from the machine, said at "
                   "start: sleep on vLLM's CPU build, yield on a GPU host)")
    g.add_argument("--frontend-torch-threads", type=int, metavar="N",
                   help="torch intra-op threads of the frontend process, where vLLM's image "
                   "processor normalizes and patchifies each image; more threads contend with the "
                   "preprocessing workers for the cores and spin at every operation's end "
                   f"(default: {_d('frontend_torch_threads')})")
    g.add_argument("--frontend-render-threads", type=int, metavar="N",
                   help="threads of vLLM's renderer in the frontend process: they tokenize and run "
                   "vLLM's image processor (rescale, normalize, patchify of each ready-sized "
                   "image) beside the event loop. More than one turns vLLM's multimodal "
                   "processor cache off (it is not thread-safe) and needs upstream vLLM: its CPU "
                   "build runs the image processor on one thread whatever the count "
                   "(default: chosen from the machine, said at start: 4 on a GPU host of 16 "
                   "cores or more, 1 on vLLM's CPU build)")
    g = p.add_argument_group("replicas and tensor parallelism")
    g.add_argument("--replicas", type=int, metavar="N",
                   help="serve the model as N replicas behind this one endpoint: N whole servers "
                   "(each its own vLLM engine process and its own preprocessing workers, sized "
                   "to its share of the cores) on local ports, and a frontend in this process "
                   "(not the gateway: docs/runtime.md says why) that sends "
                   "each request to the ready replica with the fewest requests outstanding and "
                   "retries one refused (503/429) on another. On a GPU host replica i gets "
                   "CUDA_VISIBLE_DEVICES=i (with --tensor-parallel-size T: GPUs i*T..i*T+T-1), "
                   "on vLLM's CPU build cores of its own; a layout that does not fit is refused "
                   "at start. /health is 200 when every replica is ready and lists each; "
                   "/metrics labels every replica's samples with replica=\"i\"; /v1/events is "
                   f"each replica's own (see /health for their ports) (default: {_d('replicas')})")
    g.add_argument("--tensor-parallel-size", type=int, metavar="T",
                   help="GPUs each engine spreads the model over (vLLM's tensor_parallel_size, "
                   "passed through; refused at start where the host has fewer GPUs) "
                   f"(default: {_e('tensor_parallel_size')})")
    g = p.add_argument_group("vLLM engine (passed through)")
    g.add_argument("--max-model-len", type=int, help=f"default: {_e('max_model_len')}")
    g.add_argument("--max-num-seqs", type=int, help=f"default: {_e('max_num_seqs')}")
    g.add_argument("--gpu-memory-utilization", type=float,
                   help="KV-cache memory as vLLM's fraction; on vLLM's CPU build a fraction of "
                   "the NUMA node's memory minus the engine's RSS, which goes negative on a "
                   "small node (default on CPU: sized by edgeserve, see --kv-cache-memory-bytes; "
                   "on GPU: vLLM's default)")
    g.add_argument("--kv-cache-memory-bytes", type=int, metavar="N",
                   help="fixed KV-cache size in bytes (default on vLLM's CPU build: "
                   "max-num-seqs x max-model-len tokens x the model's KV bytes per token, at "
                   "most half the NUMA node's available memory after the weights, at least one "
                   "request of max-model-len; the start-up log shows the derivation)")
    g.add_argument("--dtype", metavar="DTYPE",
                   help="the engine's precision, overriding the machine's choice: bfloat16, "
                   "float32, float16, or auto for the checkpoint's own (default: chosen at start "
                   "and printed with its reason: on vLLM's CPU build bfloat16 where the CPU has "
                   "avx512_bf16 or amx_bf16, float32 otherwise; on a GPU the model's own dtype)")
    g.add_argument("--enforce-eager", action="store_const", const=True, help="default: off")
    g.add_argument("--seed", type=int, help=f"engine seed (default: {_e('seed')})")
    g.add_argument("--no-prefix-caching", dest="enable_prefix_caching", action="store_const",
                   const=False, help="disable vLLM's prefix cache")
    g.add_argument("--engine-arg", dest="engine_args", action="append", metavar="KEY=VALUE",
                   help="any other vLLM AsyncEngineArgs field, VALUE as JSON or a string "
                   "(repeatable), e.g. --engine-arg enforce_eager=true. vLLM's multimodal "
                   "processor cache is capped by default at room for 4 x max-num-seqs images of "
                   "--max-pixels, at most 1/16 of the machine's memory and 4 GiB; change it "
                   "with --engine-arg mm_processor_cache_gb=N (0 turns it off)")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    from edgeserve.config import build_config, load_config_file

    file_values = load_config_file(args.config) if args.config else {}
    overrides: dict[str, Any] = {field: getattr(args, dest, None) for dest, field in _FIELDS.items()}
    for item in args.engine_args or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--engine-arg expects KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        overrides[f"engine.{key.replace('-', '_')}"] = value
    return build_config(file_values, overrides)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except ConfigError as e:
        say(str(e), error=True)
        return 2
    if cfg.replicas > 1:
        return run_replicas(cfg, args)
    if cfg.engine.tensor_parallel_size > 1:  # its GPUs are counted before the engine starts
        from edgeserve import replicas

        try:
            replicas.slots_for(cfg)
        except ConfigError as e:
            say(str(e), error=True)
            return 2
    import asyncio
    import contextlib
    from pathlib import Path

    from edgeserve import start_failures
    from edgeserve.console import default_engine_log, engine_output_to, install_console_logging
    from edgeserve.server.app import serve

    install_console_logging()
    log_path = Path(cfg.engine_log) if cfg.engine_log else default_engine_log(cfg.port)
    if cfg.verbose:
        redirect: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    else:
        say(f"starting (vLLM's output: {log_path})")
        redirect = engine_output_to(log_path)
    with redirect:
        try:
            status = asyncio.run(serve(cfg))
        except Exception as e:  # the port, the model folder, the engine or the workers
            import traceback

            traceback.print_exc()  # into the engine log (or the terminal with --verbose)
            say(start_failures.explain(e, None if cfg.verbose else log_path,
                                       host=cfg.host, port=cfg.port), error=True)
            return 1
    if status:
        say("stopped because the vLLM engine died and no new one could start", error=True)
    return status


def run_replicas(cfg: ServeConfig, args: argparse.Namespace) -> int:
    """``--replicas N``: check that N fit, then the replicas' frontend (edgeserve.replicas)."""
    from edgeserve import replicas
    from edgeserve.config import load_config_file
    from edgeserve.console import install_console_logging

    install_console_logging()
    try:
        slots = replicas.slots_for(cfg)
        workers = args.workers if args.workers is not None else (
            load_config_file(args.config).get("workers") if args.config else None)
    except ConfigError as e:
        say(str(e), error=True)
        return 2
    try:
        return replicas.run(cfg, slots, workers)
    except OSError as e:  # the port
        from edgeserve import start_failures

        say(start_failures.explain(e, None, host=cfg.host, port=cfg.port), error=True)
        return 1
