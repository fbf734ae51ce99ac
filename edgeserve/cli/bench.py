"""``edgeserve bench``: load-test an OpenAI-compatible VLM server, sweep rates, compare servers.

Subcommands:

* ``run``     one load run against a running server (ours or ``vllm serve``); prints and saves
              the figures with ``vllm bench serve``'s key names.
* ``sweep``   several runs at increasing request rates; max sustainable rate under a TTFT p99
              bound; JSON and PNG plots.
* ``compare`` starts each server in turn (edgeserve split, edgeserve inline, ``vllm serve``,
              ``vllm serve --api-server-count 2``) pinned to the same cores, sweeps each, writes a
              table and plots.
* ``preproc`` the preprocessing micro-benchmark (``benchmarks/preproc.py``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any


def _rate(text: str) -> float:
    if text.lower() in {"inf", "infinity"}:
        return math.inf
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"rate must be > 0 req/s, got {text}")
    return value


def _rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(_rate(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate list {text!r}: use e.g. 0.5,1,2,4") from None


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (prepared before the timed part)")
    g.add_argument("--model", default="", help="model name in requests (default: ask /v1/models)")
    g.add_argument(
        "--images", default="12mp",
        help="image size mix: preset (12mp, small, 1mp), WxH, or WxH:WEIGHT,… (default 12mp)",
    )
    g.add_argument("--image-content", choices=["photo", "noise"], default="photo",
                   help="photo: scikit-image photographs scaled to size; noise: worst case")
    g.add_argument("--image-folder", type=Path, help="send the images in this folder instead")
    g.add_argument("--images-per-request", type=int, default=1, help="0 for text-only requests")
    g.add_argument("--prompt", action="append", dest="prompts", metavar="TEXT",
                   help="prompt text (repeat for several, cycled)")
    g.add_argument("--prompts-file", type=Path, help="one prompt per line, cycled")
    g.add_argument("--output-len", default="32", help="output tokens: N or MIN-MAX (default 32)")
    g.add_argument("--no-ignore-eos", action="store_true",
                   help="let the model stop at EOS (default: generate exactly the drawn length)")
    g.add_argument("--repeat-images", action="store_true",
                   help="reuse a few images instead of a unique one per request (server caches hit)")
    g.add_argument("--jpeg-quality", type=int, default=90)
    g.add_argument("--seed", type=int, default=0)
    d = p.add_argument_group(
        "dataset (lengths in the model's tokens; their statistics are printed before the run)")
    d.add_argument("--dataset", default="images",
                   choices=["images", "sharegpt", "chat", "prefix-repetition",
                            "mm-prefix-repetition"],
                   help="images: synthetic image requests (the flags above); sharegpt: a "
                   "ShareGPT JSON (--dataset-path); chat: generated ShareGPT-like lengths; "
                   "prefix-repetition: few shared prefixes + unique suffixes; "
                   "mm-prefix-repetition: shared system prompt + a pool of repeated images "
                   "with stable uuids (default images)")
    d.add_argument("--dataset-path", type=Path, metavar="FILE", help="the ShareGPT JSON file")
    d.add_argument("--tokenizer", type=Path, metavar="PATH",
                   help="tokenizer.json or its folder (default: the model id, when it is a "
                   "local folder)")
    d.add_argument("--sharegpt-output-len", type=int, metavar="N",
                   help="fixed output tokens (default: the length of each answer)")
    d.add_argument("--chat-prompt-len", default="256:256:4:2048", metavar="MEAN:STD:MIN:MAX",
                   help="chat prompt tokens: lognormal of this mean and std, rounded, kept "
                   "within MIN..MAX; N for a constant (default 256:256:4:2048)")
    d.add_argument("--chat-output-len", default="128:128:4:1024", metavar="MEAN:STD:MIN:MAX",
                   help="chat output tokens, the same form (default 128:128:4:1024)")
    d.add_argument("--prefix-repetition-prefix-len", type=int, default=256, metavar="N",
                   help="tokens of each shared prefix (mm: of the system prompt; default 256)")
    d.add_argument("--prefix-repetition-suffix-len", type=int, default=256, metavar="N",
                   help="unique tokens after it (default 256)")
    d.add_argument("--prefix-repetition-num-prefixes", type=int, default=10, metavar="N",
                   help="distinct prefixes (default 10; mm: one system prompt)")
    d.add_argument("--prefix-repetition-output-len", type=int, default=128, metavar="N",
                   help="output tokens of prefix-repetition requests (default 128)")
    d.add_argument("--mm-image-pool", type=int, default=4, metavar="N",
                   help="mm-prefix-repetition: distinct images, repeated (default 4; their "
                   "sizes from --images)")


def _add_report_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("report")
    g.add_argument("--goodput", nargs="+", default=[], metavar="METRIC:MS",
                   help="SLOs for goodput, e.g. ttft:2000 e2el:5000")
    g.add_argument("--percentiles", default="50,90,99", help="comma-separated (default 50,90,99)")
    g.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_parser(subparsers: Any, help_: str) -> None:
    parser = subparsers.add_parser("bench", help=help_, description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="bench_command", metavar="SUBCOMMAND", required=True)

    run = sub.add_parser("run", help="one load run against a running server",
                         description="Load-test a running OpenAI-compatible server once.")
    run.add_argument("--url", required=True, help="server, e.g. http://127.0.0.1:8000")
    run.add_argument("--label", default="", help="name of this run in outputs")
    g = run.add_argument_group("arrivals")
    g.add_argument("--request-rate", type=_rate, default=math.inf,
                   help="mean req/s (default inf: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of the gaps: 1 Poisson, <1 bursty, >1 regular")
    g.add_argument("--max-concurrency", type=int, help="closed loop: at most N requests in flight")
    g.add_argument("--num-prompts", type=int, help="number of requests (default 100)")
    g.add_argument("--duration", type=float, help="send for this many seconds instead of a count")
    _add_workload_args(run)
    _add_report_args(run)
    run.add_argument("--save-result", type=Path, metavar="JSON", help="write the result JSON")
    run.add_argument("--save-detailed", action="store_true", help="with per-request lists")
    run.add_argument("--plot", type=Path, metavar="PNG", help="latency CDF plot")
    run.add_argument("--compare-to", type=Path, metavar="JSON",
                     help="a saved result of an earlier run: print the three throughputs of both "
                     "and warn when total and output token throughput move opposite ways")
    run.set_defaults(func=run_cmd)

    sweep = sub.add_parser("sweep", help="request-rate sweep against a running server",
                           description="Run at increasing request rates; find the highest rate "
                           "whose TTFT p99 stays under a bound.")
    sweep.add_argument("--url", required=True)
    sweep.add_argument("--label", default="")
    _add_sweep_args(sweep)
    _add_workload_args(sweep)
    _add_report_args(sweep)
    sweep.add_argument("--out", type=Path, default=Path("results/sweep"),
                       help="folder for sweep.json and plots (default results/sweep)")
    sweep.set_defaults(func=sweep_cmd)

    compare = sub.add_parser("compare", help="start each server in turn, sweep it, compare",
                             description="edgeserve split vs inline vs vllm serve vs "
                             "vllm serve --api-server-count 2, same model, cores and workload.")
    compare.add_argument("--model-path", type=Path, default=Path("models/tiny-qwen2-vl"))
    compare.add_argument("--servers", default="edgeserve-split,edgeserve-inline,vllm,vllm-asc2",
                         help="comma-separated server kinds, in order: edgeserve-split, "
                              "edgeserve-inline, edgeserve-split-onnx (--encoder onnx), "
                              "edgeserve-split-openvino (the same on openvino:CPU), vllm, "
                              "vllm-asc2; KIND:LABEL is a variant of a kind with its own "
                              "--server-arg (e.g. edgeserve-split-onnx:1w with "
                              "--server-arg 'edgeserve-split-onnx:1w=--workers 1'), run in the "
                              "same rounds as the others")
    compare.add_argument("--workloads", default="12mp,small",
                         help="comma-separated image size mixes, one sweep each")
    compare.add_argument("--workload-rates", action="append", default=[], metavar="NAME=RATES",
                         help="rates for one workload, e.g. 12mp=0.5,1,2 (default: --rates)")
    compare.add_argument("--server-cores", default="0,1", help="taskset CPU list for servers")
    compare.add_argument("--client-cores", default="",
                         help="taskset CPU list for this load generator (default: not pinned)")
    compare.add_argument("--rounds", type=int, default=1,
                         help="repeat the whole server sequence (A B C D A B C D …)")
    compare.add_argument("--port", type=int, default=18500)
    compare.add_argument("--max-pixels", type=int, default=None, metavar="N",
                         help="image-token budget for every server (one token per 28x28 "
                              "pixels; e.g. 200704 = 256 tokens): edgeserve --max-pixels, vLLM "
                              "--mm-processor-kwargs (default: the model's, 1003520 for the "
                              "tiny model)")
    compare.add_argument("--startup-timeout", type=float, default=300.0)
    compare.add_argument("--server-arg", action="append", default=[], metavar="KIND=ARGS",
                         help="extra arguments for one server kind or KIND:LABEL variant, "
                         "e.g. vllm='--max-num-seqs 8'")
    _add_sweep_args(compare)
    _add_workload_args(compare)
    _add_report_args(compare)
    compare.add_argument("--out", type=Path, default=Path("results/compare"))
    compare.add_argument("--from-json", type=Path, nargs="+", metavar="COMPARE_JSON",
                         help="run nothing: redo the tables and plots of saved compare.json "
                         "files into --out (several files: their rounds are pooled)")
    compare.set_defaults(func=compare_cmd)

    # every argument goes to the script (its own --help included): "+" as the only prefix
    # character makes "--out x" plain positionals for this parser
    pre = sub.add_parser("preproc", help="preprocessing micro-benchmark (benchmarks/preproc.py)",
                         description="Runs benchmarks/preproc.py with the remaining arguments.",
                         add_help=False, prefix_chars="+")
    pre.add_argument("rest", nargs="*")
    pre.set_defaults(func=preproc_cmd)


def _add_sweep_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep")
    g.add_argument("--rates", type=_rates, default=(0.5, 1.0, 2.0, 3.0, 4.0, 6.0),
                   help="offered request rates, req/s (default 0.5,1,2,3,4,6)")
    g.add_argument("--duration-per-rate", type=float, default=None, metavar="S",
                   help="seconds of arrivals per rate (default 20; the queue must have time to "
                   "grow past saturation)")
    g.add_argument("--num-prompts", type=int, default=None,
                   help="a fixed number of requests per rate instead of a duration")
    g.add_argument("--burstiness", type=float, default=1.0)
    g.add_argument("--ttft-p99-bound", type=float, default=2000.0, metavar="MS",
                   help="TTFT p99 a rate must keep to count as sustained (default 2000 ms)")
    g.add_argument("--warmup", type=int, default=4, help="unmeasured requests first (default 4)")
    g.add_argument("--keep-going", action="store_true",
                   help="run every rate even after the server saturated")


# ---- mapping flags onto configs ---------------------------------------------------------------


def _workload(args: argparse.Namespace, sizes: str | None = None) -> Any:
    from edgeserve.bench.workload import DEFAULT_PROMPT, ImageContent, WorkloadConfig

    prompts = list(args.prompts or [])
    if args.prompts_file:
        prompts += [ln.strip() for ln in args.prompts_file.read_text().splitlines() if ln.strip()]
    return WorkloadConfig(
        model=args.model,
        sizes=sizes or args.images,
        content=ImageContent(args.image_content),
        folder=args.image_folder,
        images_per_request=args.images_per_request,
        prompts=tuple(prompts) or (DEFAULT_PROMPT,),
        output_len=args.output_len,
        ignore_eos=not args.no_ignore_eos,
        unique_images=not args.repeat_images,
        jpeg_quality=args.jpeg_quality,
        seed=args.seed,
    )


def _dataset(args: argparse.Namespace) -> Any:
    from edgeserve.bench.datasets import DatasetConfig, DatasetKind
    from edgeserve.bench.lengths import LengthDist

    return DatasetConfig(
        kind=DatasetKind(args.dataset),
        path=args.dataset_path,
        tokenizer=args.tokenizer,
        sharegpt_output_len=args.sharegpt_output_len,
        chat_prompt_len=LengthDist.parse(args.chat_prompt_len),
        chat_output_len=LengthDist.parse(args.chat_output_len),
        prefix_len=args.prefix_repetition_prefix_len,
        suffix_len=args.prefix_repetition_suffix_len,
        num_prefixes=args.prefix_repetition_num_prefixes,
        output_len=args.prefix_repetition_output_len,
        image_pool=args.mm_image_pool,
    )


def _report_opts(args: argparse.Namespace) -> dict[str, Any]:
    from edgeserve.bench.report import parse_goodput

    try:
        percentiles = tuple(float(p) for p in args.percentiles.split(",") if p.strip())
    except ValueError:
        raise ValueError(f"bad percentiles {args.percentiles!r}: use e.g. 50,90,99") from None
    return {
        "goodput_slo_ms": tuple(parse_goodput(args.goodput).items()),
        "percentiles": percentiles,
        "request_timeout_s": args.request_timeout,
        "progress": not args.no_progress,
    }


def _sweep_config(
    args: argparse.Namespace, base_url: str, sizes: str | None = None,
    rates: tuple[float, ...] | None = None,
) -> Any:
    from edgeserve.bench.run import RunConfig
    from edgeserve.bench.sweep import SweepConfig

    base = RunConfig(base_url=base_url, workload=_workload(args, sizes), dataset=_dataset(args),
                     label=args.label if hasattr(args, "label") else "", **_report_opts(args))
    return SweepConfig(
        base=base,
        rates_rps=rates or args.rates,
        requests_per_rate=args.num_prompts,
        duration_per_rate_s=args.duration_per_rate if args.duration_per_rate is not None else (
            20.0 if args.num_prompts is None else None),
        burstiness=args.burstiness,
        ttft_p99_bound_ms=args.ttft_p99_bound,
        warmup_requests=args.warmup,
        stop_when_saturated=not args.keep_going,
    )


def _fail(msg: str) -> int:
    print(f"edgeserve bench: {msg}", file=sys.stderr)
    return 2


# ---- subcommands --------------------------------------------------------------------------------


def run_cmd(args: argparse.Namespace) -> int:
    import asyncio
    import json

    import aiohttp

    from edgeserve.bench.arrivals import ArrivalConfig
    from edgeserve.bench.report import format_summary
    from edgeserve.bench.run import RunConfig, run_benchmark

    try:
        num = args.num_prompts if args.num_prompts is not None else (
            100 if args.duration is None else None)
        arrivals = ArrivalConfig(
            rate_rps=args.request_rate,
            burstiness=args.burstiness,
            max_concurrency=args.max_concurrency,
            num_requests=num,
            duration_s=args.duration,
            seed=args.seed,
        )
        config = RunConfig(base_url=args.url, workload=_workload(args), dataset=_dataset(args),
                           arrivals=arrivals,
                           label=args.label, save_detailed=args.save_detailed, **_report_opts(args))
    except (ValueError, OSError) as e:
        return _fail(str(e))
    what = config.workload.label if args.dataset == "images" else config.dataset.label
    print(f"edgeserve bench run: {what}; {arrivals.label}; {args.url}", flush=True)
    try:
        result = asyncio.run(run_benchmark(config))
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return _fail(f"cannot reach {args.url}: {e}")
    except ValueError as e:
        return _fail(str(e))
    print(format_summary(result, config.percentiles))
    if args.compare_to:
        from edgeserve.bench.throughput import direction_warning, throughput_line

        try:
            earlier = json.loads(args.compare_to.read_text())
        except (OSError, ValueError) as e:
            return _fail(f"cannot read {args.compare_to}: {e}")
        print(f"{args.compare_to}: {throughput_line(earlier)}")
        print(f"this run: {throughput_line(result)}")
        warning = direction_warning(earlier, result, str(args.compare_to), "this run")
        if warning:
            print(warning)
    if args.save_result:
        args.save_result.parent.mkdir(parents=True, exist_ok=True)
        args.save_result.write_text(json.dumps(result, indent=1))
        print(f"saved {args.save_result}")
    if args.plot:
        from edgeserve.bench.plots import plot_latency_cdfs

        plot_latency_cdfs({args.label or args.url: result}, args.plot)
        print(f"saved {args.plot}")
    return 0 if result["completed"] else 1


def sweep_cmd(args: argparse.Namespace) -> int:
    import asyncio

    import aiohttp

    from edgeserve.bench.sweep import format_sweep_table, run_sweep, save_sweep

    try:
        config = _sweep_config(args, args.url)
    except (ValueError, OSError) as e:
        return _fail(str(e))
    try:
        sweep = asyncio.run(run_sweep(config))
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return _fail(f"cannot reach {args.url}: {e}")
    except ValueError as e:
        return _fail(str(e))
    print(format_sweep_table({args.label or args.url: sweep}))
    for path in save_sweep({args.label or args.url: sweep}, args.out):
        print(f"saved {path}")
    return 0


def compare_cmd(args: argparse.Namespace) -> int:
    from edgeserve.bench.compare import format_summary_table, load, run_compare
    from edgeserve.bench.compare import save as save_compare

    if args.from_json:
        try:
            result = load(args.from_json[0])
            for more in args.from_json[1:]:
                for workload, by_server in load(more).sweeps.items():
                    for server, rounds in by_server.items():
                        for sweep in rounds:
                            result.add(workload, server, sweep)
        except (OSError, ValueError, KeyError) as e:
            return _fail(f"cannot read {' '.join(map(str, args.from_json))}: {e}")
        print(format_summary_table(result))
        for path in save_compare(result, args.out):
            print(f"saved {path}")
        return 0

    try:
        config = compare_config(args)
    except (ValueError, OSError, argparse.ArgumentTypeError) as e:
        return _fail(str(e))
    return run_compare(config)


def compare_config(args: argparse.Namespace) -> Any:
    """``bench compare``'s flags as a :class:`~edgeserve.bench.compare.CompareConfig`;
    ValueError (or argparse.ArgumentTypeError for a bad rate) with the fix in its message."""
    from edgeserve.bench.compare import CompareConfig

    extra: dict[str, str] = {}
    for item in args.server_arg:
        kind, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"bad --server-arg {item!r}: use KIND=ARGS")
        extra[kind.strip()] = value
    workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    rates: dict[str, tuple[float, ...]] = {}
    for item in args.workload_rates:
        name, sep, value = item.partition("=")
        if not sep or name.strip() not in workloads:
            raise ValueError(f"bad --workload-rates {item!r}: use NAME=R1,R2,… for a workload "
                             "in --workloads")
        rates[name.strip()] = _rates(value)
    sweeps = {w: _sweep_config(args, f"http://127.0.0.1:{args.port}", w, rates.get(w))
              for w in workloads}
    return CompareConfig(
        model_path=args.model_path,
        servers=tuple(k.strip() for k in args.servers.split(",") if k.strip()),
        sweeps=tuple(sweeps.items()),
        server_cores=args.server_cores,
        client_cores=args.client_cores,
        rounds=args.rounds,
        port=args.port,
        startup_timeout_s=args.startup_timeout,
        extra_server_args=tuple(extra.items()),
        out_dir=args.out,
        max_pixels=args.max_pixels,
    )


def preproc_cmd(args: argparse.Namespace) -> int:
    """Run ``benchmarks/preproc.py`` as its own process (it pins itself and re-executes)."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "preproc.py"
    if not script.exists():
        return _fail(f"the preprocessing benchmark is not there ({script})")
    return subprocess.call([sys.executable, str(script), *args.rest])
