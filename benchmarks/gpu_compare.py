"""The GPU head-to-head: how many 12 MP image requests per second each server sustains on one GPU.

Servers, each started alone on the GPU, serving the same model folder (``edgeserve models
build-random``: a published architecture with random weights):

* ``edgeserve-split``  — ``edgeserve serve --mode split`` with its default workers (cores − 2);
* ``edgeserve-inline`` — the same preprocessing on the frontend's event loop;
* ``vllm``             — ``vllm serve`` with its defaults;
* ``vllm-best``        — ``vllm serve --api-server-count N`` (N API processes share the image
  work; the multimodal processor cache is on by default);
* ``gpu-ceiling``      — no server: vLLM's ``AsyncLLM`` in this process fed images already
  decoded and resized to the target size (prepared before the clock), so the rate is what the GPU
  and vLLM's engine sustain when no CPU stage holds them back.

Every server gets the same Poisson arrival schedules, the same 12 MP JPEG photos (unique per
request, resized by the server to ``--image-tokens`` image tokens) and the same output lengths.
Per server: a rate sweep; the sustained rate (TTFT p99 within 1 s and 3 s, no failures,
interpolated between rates); at the highest rate sustained within 3 s, the GPU's busy fraction
(``nvidia-smi``, :mod:`edgeserve.bench.gpu_busy`), the stall (edgeserve's own counter: GPU free
while requests wait in CPU stages; the client estimate for stock vLLM) and the server's CPU
seconds per request (its process tree, psutil).

A lent GPU runs one command for at most 10 minutes, so the servers can run one per command
(``--servers vllm``): each writes its part under ``--parts``, and every invocation merges all
parts present into ``--out`` (``benchmarks/results/gpu_compare.json``) and a plot beside it.
``--smoke`` runs the whole path on this CPU with the tiny model (small rates, short runs).

    python benchmarks/gpu_compare.py --model /tmp/qwen2-vl-2b            # all servers
    python benchmarks/gpu_compare.py --model /tmp/qwen2-vl-2b --servers vllm,vllm-best
    python benchmarks/gpu_compare.py --smoke                             # CPU, tiny model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pickle
import shlex
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s  # noqa: E402
from edgeserve.bench.compare import ServerProcess  # noqa: E402
from edgeserve.bench.gpu_busy import GpuBusySampler, device_name  # noqa: E402
from edgeserve.bench.report import percentile_key  # noqa: E402
from edgeserve.bench.run import RunConfig, run_benchmark  # noqa: E402
from edgeserve.bench.sweep import (  # noqa: E402
    SweepResult,
    format_sweep_table,
    interpolated_max_rate,
    is_sustained,
    max_sustained_rate,
    warm_up,
)
from edgeserve.bench.workload import (  # noqa: E402
    PreparedRequest,
    WorkloadConfig,
    parse_size_mix,
    prepare_requests,
)

SERVED_NAME = "m"  # every server answers to this model name, so bodies are shared
BOUNDS_MS = (1000.0, 3000.0)
GPU_RATES_RPS = (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
SMOKE_RATES_RPS = (0.5, 1.0)
OUT = ROOT / "benchmarks" / "results" / "gpu_compare.json"
MiB = 1024 * 1024


class Server(StrEnum):
    SPLIT = "edgeserve-split"
    INLINE = "edgeserve-inline"
    VLLM = "vllm"
    VLLM_BEST = "vllm-best"
    CEILING = "gpu-ceiling"


@dataclass(frozen=True, slots=True)
class GpuCompareConfig:
    model: Path
    servers: tuple[Server, ...]
    image_tokens: int = 1280
    rates_rps: tuple[float, ...] = GPU_RATES_RPS
    duration_s: float = 15.0
    output_len: str = "32-64"
    sizes: str = "12mp"  # the photos' size mix (edgeserve bench --sizes); 12 MP by default
    warmup_requests: int = 2
    api_servers: int = 4  # vllm-best's --api-server-count
    # and its renderer threads per API server (vLLM's --renderer-num-workers; more than one
    # needs its processor cache off): the image processor off each API server's event loop
    render_threads: int = 4
    max_num_seqs: int = 64
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.85
    smoke: bool = False  # CPU: a fixed small KV cache instead of a GPU memory fraction
    port: int = 18600
    startup_timeout_s: float = 420.0
    parts: Path = Path("/tmp/edgeserve_gpu_compare")
    bodies: Path = Path("/dev/shm/edgeserve_gpu_bodies")
    out: Path = OUT
    prepare_processes: int = max(1, min(16, os.cpu_count() or 1))

    def __post_init__(self) -> None:
        if not (self.model / "config.json").exists():
            raise ValueError(f"no model folder at {self.model} (edgeserve models build-random "
                             "qwen2-vl-2b --out DIR)")
        if not self.servers:
            raise ValueError("no servers to run")
        if self.image_tokens < 4:
            raise ValueError("image tokens must be >= 4")
        if list(self.rates_rps) != sorted(self.rates_rps) or min(self.rates_rps) <= 0:
            raise ValueError(f"rates must be positive and increasing, got {self.rates_rps}")
        parse_size_mix(self.sizes)  # a bad mix is refused before any server starts
        if self.duration_s <= 0 or self.api_servers < 1 or self.render_threads < 1:
            raise ValueError("the duration must be > 0 s, the API server count and the render "
                             "threads >= 1")

    @property
    def max_pixels(self) -> int:
        from mm_preproc.spec import read_spec

        return read_spec(self.model).budget(self.image_tokens)

    @property
    def budget_dir(self) -> Path:
        return self.parts / f"{self.model.name}-{self.image_tokens}tok"

    def trace(self, server: Server) -> Path:
        """Where an edgeserve server writes its request records and samples (JSON Lines)."""
        return self.budget_dir / "traces" / f"{server}.jsonl"

    def sizing(self) -> list[str]:
        """Engine limits every server gets (the same on each)."""
        argv = ["--max-model-len", str(self.max_model_len), "--max-num-seqs",
                str(self.max_num_seqs)]
        if self.smoke:
            return [*argv, "--kv-cache-memory-bytes", str(256 * MiB)]
        return [*argv, "--gpu-memory-utilization", str(self.gpu_memory_utilization)]

    def argv(self, server: Server) -> list[str]:
        """The command line that starts ``server`` (not the in-process ceiling)."""
        py = sys.executable
        common = ["--port", str(self.port), "--served-model-name", SERVED_NAME, *self.sizing()]
        if server in (Server.SPLIT, Server.INLINE):
            mode = "split" if server is Server.SPLIT else "inline"
            return [py, "-m", "edgeserve", "serve", "--model", str(self.model), "--mode", mode,
                    "--max-pixels", str(self.max_pixels), "--trace", str(self.trace(server)),
                    *common]
        from edgeserve import vllm_compat

        load, _ = vllm_compat.load_format_args(self.model, {})
        argv = [py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
                "--host", "127.0.0.1", *common, "--disable-uvicorn-access-log",
                "--limit-mm-per-prompt", json.dumps({"image": 4, "video": 0}),
                "--mm-processor-kwargs", json.dumps({"max_pixels": self.max_pixels})]
        if load:
            argv += ["--load-format", load["load_format"]]
        if server is Server.VLLM_BEST:
            argv += ["--api-server-count", str(self.api_servers)]
            if self.render_threads > 1:
                argv += ["--renderer-num-workers", str(self.render_threads),
                         "--mm-processor-cache-gb", "0"]
        return argv


def workload(cfg: GpuCompareConfig) -> WorkloadConfig:
    return WorkloadConfig(model=SERVED_NAME, sizes=cfg.sizes, output_len=cfg.output_len)


def _prepare_chunk(args: tuple[WorkloadConfig, int, int]) -> list[PreparedRequest]:
    config, n, first = args
    return prepare_requests(config, n, SERVED_NAME, first)


def bodies(cfg: GpuCompareConfig, rate_index: int, n: int) -> list[PreparedRequest]:
    """The ``n`` requests of rate ``rate_index`` (the same for every server), built in parallel
    once and kept under ``cfg.bodies``."""
    mix = cfg.sizes.replace(":", "w").replace(",", "+")
    path = cfg.bodies / f"{mix}-{cfg.output_len}-{rate_index}-{n}.pkl"
    if path.exists():
        out: list[PreparedRequest] = pickle.loads(path.read_bytes())
        return out
    first = (rate_index + 1) * 100_000
    step = max(1, math.ceil(n / cfg.prepare_processes))
    jobs = [(workload(cfg), min(step, n - s), first + s) for s in range(0, n, step)]
    with ProcessPoolExecutor(len(jobs)) as pool:
        chunks = list(pool.map(_prepare_chunk, jobs))
    out = [replace(r, index=i) for i, r in enumerate(r for c in chunks for r in c)]
    cfg.bodies.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(out))
    return out


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its living descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def _saturated(point: dict[str, Any]) -> bool:
    p99 = point.get(percentile_key("ttft", 99.0)) or math.inf
    return not is_sustained(point, BOUNDS_MS[-1]) and p99 > 3 * BOUNDS_MS[-1]


def _arrivals(cfg: GpuCompareConfig, i: int, rate: float) -> ArrivalConfig:
    return ArrivalConfig(rate_rps=rate, num_requests=None, duration_s=cfg.duration_s, seed=i)


async def sweep_http(cfg: GpuCompareConfig, server: Server, pid: int,
                     gpu: GpuBusySampler) -> SweepResult:
    base = RunConfig(base_url=f"http://127.0.0.1:{cfg.port}", workload=workload(cfg),
                     label=server.value, progress=False, print_dataset_stats=False)
    await warm_up(base, cfg.warmup_requests)
    result = SweepResult(ttft_p99_bound_ms=BOUNDS_MS[-1])
    for i, rate in enumerate(cfg.rates_rps):
        arrivals = _arrivals(cfg, i, rate)
        offsets = [float(x) for x in arrival_offsets_s(arrivals)]
        requests = bodies(cfg, i, len(offsets))
        cpu0, t0 = tree_cpu_s(pid), time.time()
        point = await run_benchmark(replace(base, arrivals=arrivals,
                                            label=f"{server} @ {rate:g} req/s"),
                                    prepared=(requests, offsets))
        t1 = time.time()
        add_figures(point, gpu.mean(t0, t1), tree_cpu_s(pid) - cpu0)
        result.points.append(point)
        print(point_line(point), flush=True)
        if _saturated(point):
            break
    return result


def add_figures(point: dict[str, Any], gpu_busy: float | None, cpu_s: float) -> None:
    done = int(point.get("completed") or 0)
    point["gpu_busy"] = gpu_busy
    point["server_cpu_s"] = cpu_s
    point["cpu_s_per_request"] = cpu_s / done if done else None
    server = point.get("server") or {}
    point["engine_busy"] = server.get("engine_busy_fraction")  # edgeserve: its step spans
    server_stall = server.get("stall_fraction")
    point["stall"] = server_stall if server_stall is not None else point.get("stall_fraction")
    point["stall_source"] = "server" if server_stall is not None else "client estimate"


def point_line(p: dict[str, Any]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    return (f"  {p['label']}: {p['request_throughput']:.2f} req/s done, TTFT p50 "
            f"{f(p.get('median_ttft_ms'), '.0f')} p99 {f(p.get(percentile_key('ttft', 99.0)), '.0f')}"
            f" ms, GPU busy {f(p.get('gpu_busy'), '.2f')}, stall {f(p.get('stall'), '.2f')}, "
            f"CPU {f(p.get('cpu_s_per_request'), '.3f')} s/req, failed {p['failed']}")


async def run_server(cfg: GpuCompareConfig, server: Server, gpu: GpuBusySampler) -> SweepResult:
    if server is Server.CEILING:
        from gpu_ceiling import sweep_ceiling  # benchmarks/, beside this file

        return await sweep_ceiling(cfg, gpu, add_figures, point_line)
    log = cfg.budget_dir / "logs" / f"{server}.log"
    cfg.trace(server).parent.mkdir(parents=True, exist_ok=True)
    # /health: edgeserve answers 200 only once warmed up, vllm serve once its engine is up.
    proc = ServerProcess(cfg.argv(server), log, port=cfg.port, ready_path="/health").start()
    # where the server's threads ran and how busy they were (edgeserve.bench.proc_sampler)
    threads = subprocess.Popen(
        [sys.executable, "-m", "edgeserve.bench.proc_sampler", str(proc.pid),
         str(cfg.trace(server).parent / f"{server}_threads.csv")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        await proc.wait_ready(cfg.startup_timeout_s)
        print(f"{server} ready after {time.monotonic() - t0:.0f} s", flush=True)
        return await sweep_http(cfg, server, proc.pid, gpu)
    finally:
        proc.stop()
        threads.terminate()
        threads.wait(timeout=10)


def server_summary(sweep: SweepResult) -> dict[str, Any]:
    """The figures of the output schema for one server's sweep."""
    at = max_sustained_rate(sweep.points, BOUNDS_MS[-1])
    point = next((p for p in sweep.points if float(p["request_rate"]) == at), None)
    return {
        "sustained_rate_p99_3s": interpolated_max_rate(sweep.points, 3000.0) or 0.0,
        "sustained_rate_p99_1s": interpolated_max_rate(sweep.points, 1000.0) or 0.0,
        "at_rate": at,
        "gpu_busy": point.get("gpu_busy") if point else None,
        "engine_busy": point.get("engine_busy") if point else None,
        "stall": point.get("stall") if point else None,
        "stall_source": point.get("stall_source") if point else None,
        "cpu_s_per_request": point.get("cpu_s_per_request") if point else None,
    }


def merge(cfg: GpuCompareConfig, device: str) -> dict[str, Any]:
    """Every part present for this model and budget → the output JSON, its table and plot."""
    from edgeserve.bench.plots import plot_rate_curves

    sweeps: dict[str, SweepResult] = {}
    commands: dict[str, str] = {}
    for s in Server:
        part = cfg.budget_dir / f"{s}.json"
        if part.exists():
            data = json.loads(part.read_text())
            sweeps[s.value] = SweepResult.from_json(data["sweep"])
            commands[s.value] = data["command"]
    out = {
        "model": cfg.model.name, "device": device, "image_tokens": cfg.image_tokens,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "smoke": cfg.smoke,
        "images": ("12 MP (4000x3000)" if cfg.sizes == "12mp" else cfg.sizes)
        + " JPEG photos, unique per request",
        "arrivals": f"Poisson, {cfg.duration_s:g} s per rate", "output_len": cfg.output_len,
        "servers": {name: server_summary(sw) for name, sw in sweeps.items()},
        "commands": commands,
        "sweeps": {name: sw.to_json() for name, sw in sweeps.items()},
    }
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cfg.out.write_text(json.dumps(out, indent=1))
    cfg.out.with_suffix(".md").write_text(format_sweep_table(sweeps) + "\n")
    if sweeps:
        plot_rate_curves(sweeps, cfg.out.with_suffix(".png"),
                         title=f"{cfg.model.name} on {device}, {cfg.image_tokens} image tokens")
    return out


async def main_async(cfg: GpuCompareConfig) -> int:
    device = device_name() or ("cpu (smoke)" if cfg.smoke else "no GPU found")
    gpu = GpuBusySampler(cfg.budget_dir / "gpu_busy.csv")
    cfg.budget_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    try:
        for server in cfg.servers:
            print(f"== {server} ({cfg.image_tokens} image tokens, {device})", flush=True)
            try:
                sweep = await run_server(cfg, server, gpu)
            except RuntimeError as e:
                print(f"  {server} failed: {e}", flush=True)
                failed.append(server)
                continue
            command = ("in-process AsyncLLM" if server is Server.CEILING
                       else shlex.join(cfg.argv(server)))
            (cfg.budget_dir / f"{server}.json").write_text(json.dumps(
                {"sweep": sweep.to_json(), "command": command}))
    finally:
        gpu.stop()
    out = merge(cfg, device)
    for name, s in out["servers"].items():
        print(f"{name:>17}: {s['sustained_rate_p99_3s']:.2f} req/s (p99 <= 3 s), "
              f"{s['sustained_rate_p99_1s']:.2f} (<= 1 s); GPU busy {s['gpu_busy']}, stall "
              f"{s['stall']}, CPU s/req {s['cpu_s_per_request']}", flush=True)
    print(f"wrote {cfg.out}", flush=True)
    return 1 if failed else 0


def config_from_args(argv: list[str] | None = None) -> GpuCompareConfig:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="model folder (default: the tiny model with "
                   "--smoke; otherwise required)")
    p.add_argument("--servers", default=",".join(s.value for s in Server))
    p.add_argument("--image-tokens", type=int, default=1280)
    p.add_argument("--rates", default=None, help="offered req/s, e.g. 2,4,8")
    p.add_argument("--duration", type=float, default=None, help="seconds of arrivals per rate")
    p.add_argument("--api-servers", type=int, default=4, help="vllm-best's --api-server-count")
    p.add_argument("--render-threads", type=int, default=4,
                   help="vllm-best's --renderer-num-workers per API server (1: vLLM's default, "
                        "with its processor cache; more turn the cache off)")
    p.add_argument("--sizes", default="12mp",
                   help="the photos' sizes with weights, as edgeserve bench --sizes "
                        "(e.g. 1280x720:2,800x600:1; default 12mp)")
    p.add_argument("--output-len", default=None,
                   help="output tokens per request, N or LO-HI (default 32-64; 8-16 with --smoke)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--parts", type=Path, default=Path("/tmp/edgeserve_gpu_compare"))
    p.add_argument("--smoke", action="store_true",
                   help="the whole path on the CPU with the tiny model, small rates")
    a = p.parse_args(argv)
    try:
        servers = tuple(Server(s.strip()) for s in a.servers.split(",") if s.strip())
    except ValueError:
        p.error(f"--servers: known servers are {', '.join(s.value for s in Server)}")
    model = a.model
    if model is None:
        if not a.smoke:
            p.error("--model DIR is required (edgeserve models build-random qwen2-vl-2b --out DIR)")
        from models.tiny_qwen2_vl import DEFAULT_DIR, build

        model = build(DEFAULT_DIR)
    rates = tuple(float(r) for r in a.rates.split(",")) if a.rates else (
        SMOKE_RATES_RPS if a.smoke else GPU_RATES_RPS)
    out = a.out or (ROOT / "results" / "gpu_compare_smoke.json" if a.smoke else OUT)
    try:
        return GpuCompareConfig(
            model=Path(model), servers=servers, image_tokens=a.image_tokens, rates_rps=rates,
            duration_s=a.duration or (6.0 if a.smoke else 15.0), api_servers=a.api_servers,
            render_threads=a.render_threads,
            out=out, parts=a.parts, smoke=a.smoke, max_num_seqs=16 if a.smoke else 64,
            output_len=a.output_len or ("8-16" if a.smoke else "32-64"), sizes=a.sizes,
            warmup_requests=1 if a.smoke else 2,
            bodies=a.parts / "bodies")
    except ValueError as e:
        p.error(str(e))
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(asyncio.run(main_async(config_from_args())))
