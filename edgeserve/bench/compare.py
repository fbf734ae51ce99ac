"""The head-to-head: edgeserve (split, inline) against stock vLLM servers, in one run.

Each server kind is started as a subprocess pinned with ``taskset`` to the same cores, serving the
same model; every workload (e.g. 12 MP photos, then a small-image mix) is swept over the same
request rates with the same arrival schedules and image sizes; the server is stopped; the next
one starts. With ``rounds > 1`` the whole sequence repeats (A B C D A B C D …), and ratios are
taken per round, so slow drift of a shared machine hits every system alike.

Server kinds (:class:`ServerKind`):

* ``edgeserve-split``  — ``edgeserve serve --mode split``: preprocessing in worker processes.
* ``edgeserve-inline`` — ``edgeserve serve --mode inline``: the same preprocessing on the
  frontend's event loop (what the split buys).
* ``edgeserve-split-onnx`` — ``edgeserve serve --mode split --encoder onnx``: the vision tower
  on ONNX Runtime in the workers, vLLM given image embeddings.
* ``edgeserve-split-openvino`` — the same with ``--encoder-provider openvino:CPU`` (OpenVINO's
  runtime on the same graph; bfloat16 on a CPU with AMX or AVX-512 BF16).
* ``vllm``             — ``python -m vllm.entrypoints.openai.api_server`` (= ``vllm serve``).
* ``vllm-asc2``        — the same with ``--api-server-count 2`` (two API processes share the
  image work).

A server may also be a variant of a kind, ``KIND:LABEL`` (e.g. ``edgeserve-split-onnx:1w``), with
its own ``--server-arg`` (``--workers 1``): it is started, swept and reported as a server of its
own, in the same rounds as the others, so that a setting is compared A/B under the same drift.

The headline figure per workload is the max sustainable request rate (TTFT p99 within the bound,
no failures) of each system, and the ratio edgeserve-split / vllm, with the stall fractions.
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
import os
import shlex
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgeserve.bench.server_process import ServerProcess
from edgeserve.bench.sweep import (
    SweepConfig,
    SweepResult,
    format_sweep_table,
    interpolated_max_rate,
    run_sweep,
)

KV_CACHE_BYTES = 256 * 1024 * 1024  # plenty for the tiny model; a fixed size starts on a busy host


class ServerKind(enum.StrEnum):
    EDGESERVE_SPLIT = "edgeserve-split"
    EDGESERVE_INLINE = "edgeserve-inline"
    EDGESERVE_SPLIT_ONNX = "edgeserve-split-onnx"
    EDGESERVE_SPLIT_OPENVINO = "edgeserve-split-openvino"
    VLLM = "vllm"
    VLLM_ASC2 = "vllm-asc2"


def server_argv(
    kind: ServerKind, model: Path, port: int, extra: str = "", max_pixels: int | None = None
) -> list[str]:
    """The command line that starts ``kind`` on ``port`` (without the taskset prefix).

    ``max_pixels`` sets the same image-token budget on every kind (one token per 28×28 pixels):
    ``--max-pixels`` for edgeserve, ``--mm-processor-kwargs '{"max_pixels": N}'`` for vLLM.
    """
    py = sys.executable
    if kind in (ServerKind.EDGESERVE_SPLIT, ServerKind.EDGESERVE_INLINE,
                ServerKind.EDGESERVE_SPLIT_ONNX, ServerKind.EDGESERVE_SPLIT_OPENVINO):
        mode = "inline" if kind is ServerKind.EDGESERVE_INLINE else "split"
        argv = [py, "-m", "edgeserve", "serve", "--model", str(model), "--port", str(port),
                "--mode", mode]
        if kind is ServerKind.EDGESERVE_SPLIT_ONNX:
            argv += ["--encoder", "onnx"]
        if kind is ServerKind.EDGESERVE_SPLIT_OPENVINO:
            argv += ["--encoder", "onnx", "--encoder-provider", "openvino:CPU"]
        if max_pixels is not None:
            argv += ["--max-pixels", str(max_pixels)]
    else:
        argv = [py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                "--port", str(port), "--host", "127.0.0.1", "--max-model-len", "4096",
                "--max-num-seqs", "16", "--gpu-memory-utilization", "0.1",
                "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--disable-uvicorn-access-log"]
        if kind is ServerKind.VLLM_ASC2:
            argv += ["--api-server-count", "2"]
        if max_pixels is not None:
            argv += ["--mm-processor-kwargs", json.dumps({"max_pixels": max_pixels})]
    return argv + shlex.split(extra)


def server_kind(name: str) -> ServerKind:
    """The kind of a server name: a kind, or ``KIND:LABEL`` for a variant of one (the same kind
    with its own ``--server-arg``, e.g. ``edgeserve-split-onnx:1w`` with ``--workers 1``), so
    that variants of one kind alternate in the same rounds. ValueError for an unknown kind."""
    try:
        return ServerKind(name.split(":", 1)[0])
    except ValueError:
        raise ValueError(f"unknown server {name!r}; known: "
                         f"{', '.join(k.value for k in ServerKind)}") from None


@dataclass(slots=True, frozen=True)
class CompareConfig:
    model_path: Path
    servers: tuple[ServerKind | str, ...]  # kinds, or KIND:LABEL variants (server_kind)
    sweeps: tuple[tuple[str, SweepConfig], ...]  # (workload name, sweep) — base_url on `port`
    server_cores: str = "0,1"
    client_cores: str = ""
    rounds: int = 1
    port: int = 18500
    startup_timeout_s: float = 300.0
    extra_server_args: tuple[tuple[str, str], ...] = ()
    out_dir: Path = Path("results/compare")
    server_env: tuple[tuple[str, str], ...] = ()
    max_pixels: int | None = None  # image-token budget for every server; None: the model's

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("no servers to compare")
        if not self.sweeps:
            raise ValueError("no workloads to sweep")
        if self.rounds < 1:
            raise ValueError("rounds must be >= 1")
        if self.max_pixels is not None and self.max_pixels < 28 * 28:
            raise ValueError(f"max_pixels {self.max_pixels} is below one 28x28 image token")
        if not Path(self.model_path).exists():
            raise ValueError(f"model {self.model_path} does not exist (edgeserve models build-tiny)")
        for name in self.names:
            server_kind(name)
        known = {k.value for k in ServerKind} | set(self.names)
        for kind, _ in self.extra_server_args:
            if kind not in known:
                raise ValueError(f"--server-arg for unknown server {kind!r}")
        for cores in (self.server_cores, self.client_cores):
            if cores and not all(c.strip().isdigit() for c in cores.replace("-", ",").split(",")):
                raise ValueError(f"bad CPU list {cores!r}: use e.g. 0,1 or 0-1")

    @property
    def names(self) -> tuple[str, ...]:
        """Each server's name in results and logs: its kind, or KIND:LABEL."""
        return tuple(k.value if isinstance(k, ServerKind) else k for k in self.servers)

    def argv(self, name: str) -> list[str]:
        """The command line that starts server ``name`` (its kind's, plus its --server-arg)."""
        return server_argv(server_kind(name), self.model_path, self.port,
                           dict(self.extra_server_args).get(name, ""), self.max_pixels)


@dataclass(slots=True)
class CompareResult:
    """sweeps[workload][server] = one SweepResult per round."""

    sweeps: dict[str, dict[str, list[SweepResult]]] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)

    def add(self, workload: str, server: str, sweep: SweepResult) -> None:
        self.sweeps.setdefault(workload, {}).setdefault(server, []).append(sweep)

    def to_json(self) -> dict[str, Any]:
        return {
            "setup": self.setup,
            "summary": summary(self),
            "sweeps": {w: {s: [r.to_json() for r in rs] for s, rs in by.items()}
                       for w, by in self.sweeps.items()},
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def point_at(sweep: SweepResult, rate: float) -> dict[str, Any] | None:
    """The run of ``sweep`` at offered ``rate`` (None if the sweep stopped before it)."""
    return next((p for p in sweep.points if float(p["request_rate"]) == rate), None)


def _at(rounds: list[SweepResult], rate: float, key: str, server_key: bool = False) -> float | None:
    """Median over rounds of one figure of the run at ``rate``."""
    values = []
    for r in rounds:
        p = point_at(r, rate)
        v = ((p.get("server") or {}).get(key) if server_key else p.get(key)) if p else None
        if v is not None:
            values.append(float(v))
    return _median(values)


# TTFT p99 bounds at which the rate curves are also compared: "the same TTFT p99" is a choice,
# so the report shows the ratio at several, not only at the sweep's own bound.
BOUNDS_MS = (500.0, 1000.0, 2000.0, 3000.0, 5000.0)


def rates_by_bound(by_server: dict[str, list[SweepResult]]) -> dict[str, Any]:
    """Per TTFT p99 bound: each server's interpolated max sustained rate (median over rounds) and
    the split / vllm ratio (median of the per-round ratios; None where vllm sustained nothing)."""
    out: dict[str, Any] = {}
    for bound in BOUNDS_MS:
        row: dict[str, Any] = {"servers": {}}
        for server, rounds in by_server.items():
            row["servers"][server] = _median(
                [interpolated_max_rate(r.points, bound) or 0.0 for r in rounds])
        split, base = by_server.get(ServerKind.EDGESERVE_SPLIT), by_server.get(ServerKind.VLLM)
        ratios = []
        for a, b in zip(split or [], base or [], strict=False):
            rb = interpolated_max_rate(b.points, bound)
            if rb:
                ratios.append((interpolated_max_rate(a.points, bound) or 0.0) / rb)
        row["ratio_split_over_vllm"] = _median(ratios)
        out[f"{bound:g}"] = row
    return out


def summary(result: CompareResult) -> dict[str, Any]:
    """Per workload: each server's max sustained rate (median over rounds, min, max); TTFT p99
    and stall fractions at every rate all servers ran; the per-round ratio split / vllm."""
    out: dict[str, Any] = {}
    for workload, by_server in result.sweeps.items():
        common = sorted(set.intersection(
            *[{float(p["request_rate"]) for r in rs for p in r.points} for rs in by_server.values()]
        ))
        entry: dict[str, Any] = {"common_rates": common, "servers": {}}
        for server, rounds in by_server.items():
            rates = [r.max_rate_interp_rps or 0.0 for r in rounds]
            entry["servers"][server] = {
                "max_rate_interp_median": _median(rates),
                "max_rate_interp_min": min(rates),
                "max_rate_interp_max": max(rates),
                "max_rate_tested_median": _median([r.max_rate_rps or 0.0 for r in rounds]),
                "lowest_rate_tested": min(float(p["request_rate"]) for r in rounds for p in r.points),
                # other work on a shared host: 1-min load average over this server's runs
                "loadavg_1m_median": _median([float(p["loadavg_1m_before"]) for r in rounds
                                              for p in r.points
                                              if p.get("loadavg_1m_before") is not None]),
                "p99_ttft_ms_at": {str(c): _at(rounds, c, "p99_ttft_ms") for c in common},
                "stall_fraction_at": {str(c): _at(rounds, c, "stall_fraction") for c in common},
                "server_stall_fraction_at": {
                    str(c): _at(rounds, c, "stall_fraction", server_key=True) for c in common},
            }
        split, base = by_server.get(ServerKind.EDGESERVE_SPLIT), by_server.get(ServerKind.VLLM)
        if split and base:
            ratios, lower_bound = [], False
            for a, b in zip(split, base, strict=False):
                if b.max_rate_interp_rps:
                    ratios.append((a.max_rate_interp_rps or 0.0) / b.max_rate_interp_rps)
                elif a.max_rate_interp_rps:  # vLLM sustained none: below its lowest rate
                    lowest = min(float(p["request_rate"]) for p in b.points)
                    ratios.append(a.max_rate_interp_rps / lowest)
                    lower_bound = True
            if ratios:
                entry["ratio_split_over_vllm"] = {
                    "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                    "rounds": len(ratios), "lower_bound": lower_bound,
                }
        entry["by_ttft_p99_bound_ms"] = rates_by_bound(by_server)
        out[workload] = entry
    return out


def format_summary_table(result: CompareResult) -> str:
    lines = []
    for workload, entry in summary(result).items():
        common = entry["common_rates"]
        bound = next(iter(result.sweeps[workload].values()))[0].ttft_p99_bound_ms
        rounds = max(len(rs) for rs in result.sweeps[workload].values())
        lines += [f"### workload {workload}", ""]
        head = " | ".join(f"@ {c:g}" for c in common)
        lines.append(f"| server | max sustained req/s (TTFT p99 ≤ {bound:g} ms) | min–max "
                     f"({rounds} round(s)) | host load avg | TTFT p99 ms {head} |")
        lines.append("|---|---:|---:|---:|" + "---:|" * max(1, len(common)))
        for server, s in entry["servers"].items():
            rate = s["max_rate_interp_median"]
            shown = _f(rate) if rate else f"< {s['lowest_rate_tested']:g}"
            cells = " | ".join(_f(s["p99_ttft_ms_at"][str(c)], 0) for c in common)
            lines.append(f"| {server} | {shown} | {_f(s['max_rate_interp_min'])}–"
                         f"{_f(s['max_rate_interp_max'])} | {_f(s['loadavg_1m_median'], 1)} | "
                         f"{cells} |")
        lines += ["", f"| server | stall fraction, client estimate / server counter {head} |",
                  "|---|" + "---:|" * max(1, len(common))]
        for server, s in entry["servers"].items():
            cells = " | ".join(
                f"{_f(s['stall_fraction_at'][str(c)])} / {_f(s['server_stall_fraction_at'][str(c)])}"
                for c in common)
            lines.append(f"| {server} | {cells} |")
        lines += _throughput_rows(result.sweeps[workload], common)
        if "ratio_split_over_vllm" in entry:
            r = entry["ratio_split_over_vllm"]
            sign = "≥ " if r["lower_bound"] else ""
            lines += ["", f"edgeserve-split / vllm max sustained rate: median {sign}{r['median']:.2f}× "
                      f"(min {r['min']:.2f}×, max {r['max']:.2f}×, {r['rounds']} round(s))"
                      + (" — vllm sustained none of its rates in some round; its lowest tested "
                         "rate is used, so the ratio is a lower bound" if r["lower_bound"] else "")]
        servers = list(entry["servers"])
        lines += ["", "Max sustained req/s (interpolated, median over rounds) at other TTFT p99 "
                  "bounds:", "",
                  "| TTFT p99 bound ms | " + " | ".join(servers) + " | split / vllm |",
                  "|---:|" + "---:|" * (len(servers) + 1)]
        for bound, row in entry["by_ttft_p99_bound_ms"].items():
            cells = " | ".join(_f(row["servers"][s]) for s in servers)
            ratio = row["ratio_split_over_vllm"]
            lines.append(f"| {bound} | {cells} | {'n/a' if ratio is None else f'{ratio:.2f}×'} |")
        lines.append("")
    return "\n".join(lines)


def _throughput_rows(by_server: dict[str, list[SweepResult]], common: list[float]) -> list[str]:
    """Request, output and total throughput side by side (medians over rounds), and a warning
    wherever a server's total and output token throughput move opposite ways from the first's."""
    from edgeserve.bench.throughput import direction_warning

    keys = ("request_throughput", "output_throughput", "total_token_throughput")
    head = " | ".join(f"@ {c:g}" for c in common)
    lines = ["", f"| server | req/s · output tok/s · total tok/s {head} |",
             "|---|" + "---:|" * max(1, len(common))]
    at = {server: {c: {k: _at(rounds, c, k) for k in keys} for c in common}
          for server, rounds in by_server.items()}
    for server, by_rate in at.items():
        cells = " | ".join(" · ".join(_f(v[k], 1) for k in keys) for v in by_rate.values())
        lines.append(f"| {server} | {cells} |")
    servers = list(at)
    for server in servers[1:]:
        for c in common:
            a, b = at[servers[0]][c], at[server][c]
            if all(v is not None for v in (*a.values(), *b.values())):
                warning = direction_warning(a, b, f"{servers[0]} @ {c:g}", f"{server} @ {c:g}")
                if warning:
                    lines += ["", warning]
    return lines


def _f(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _cdf_rate(entry: dict[str, Any], sweeps: dict[str, SweepResult]) -> float:
    """The rate for the CDF plot: the highest one all servers ran without being hopelessly
    saturated (TTFT p99 within 3× the bound), else the lowest they all ran."""
    common = entry["common_rates"]
    if not common:
        return 0.0
    ok = [c for c in common if all(
        (p := point_at(s, c)) is not None and (p.get("p99_ttft_ms") or math.inf)
        <= 3 * s.ttft_p99_bound_ms for s in sweeps.values())]
    return max(ok) if ok else min(common)


def load(path: Path) -> CompareResult:
    """A comparison back from its ``compare.json``."""
    data = json.loads(Path(path).read_text())
    result = CompareResult(setup=data.get("setup", {}))
    for workload, by_server in data["sweeps"].items():
        for server, rounds in by_server.items():
            for r in rounds:
                result.add(workload, server, SweepResult.from_json(r))
    return result


def _rounded(obj: Any) -> Any:
    """Floats to 5 decimals (10 µs for seconds), recursively: the JSON stays small."""
    if isinstance(obj, float):
        return round(obj, 5)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_rounded(v) for v in obj]
    return obj


def save(result: CompareResult, out_dir: Path) -> list[Path]:
    """compare.json, compare.md (tables) and per-workload PNGs (rate curves, TTFT CDFs)."""
    from edgeserve.bench.plots import plot_latency_cdfs, plot_rate_curves

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "compare.json", out_dir / "compare.md"]
    paths[0].write_text(json.dumps(_rounded(result.to_json()), separators=(",", ":")))
    md = [format_summary_table(result)]
    for workload, by_server in result.sweeps.items():
        last_round = {s: rs[-1] for s, rs in by_server.items()}
        md += [f"### all points, workload {workload} (last round)", "",
               format_sweep_table(last_round), ""]
        curves = out_dir / f"rate_curves_{workload}.png"
        plot_rate_curves(last_round, curves, title=f"workload {workload}")
        paths.append(curves)
        common = _cdf_rate(summary(result)[workload], last_round)
        runs = {s: p for s, r in last_round.items() for p in r.points
                if float(p["request_rate"]) == common}
        cdf = out_dir / f"ttft_cdf_{workload}.png"
        plot_latency_cdfs({f"{s} @ {common:g} req/s": p for s, p in runs.items()}, cdf)
        paths.append(cdf)
    paths[1].write_text("\n".join(md))
    return paths


_running: list[ServerProcess] = []  # servers to stop if the comparison is interrupted


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _compare(config: CompareConfig, log: Any) -> CompareResult:
    result = CompareResult()
    base_url = f"http://127.0.0.1:{config.port}"
    env = dict(config.server_env)
    result.setup = {
        "model": str(config.model_path),
        "server_cores": config.server_cores,
        "client_cores": config.client_cores or "not pinned",
        "host_cores": os.cpu_count(),
        "rounds": config.rounds,
        "server_env": env,
        "max_pixels": config.max_pixels,
        "commands": {n: shlex.join(config.argv(n)) for n in config.names},
        "sweeps": {w: {"rates": s.rates_rps, "requests_per_rate": s.requests_per_rate,
                       "duration_per_rate_s": s.duration_per_rate_s,
                       "burstiness": s.burstiness, "ttft_p99_bound_ms": s.ttft_p99_bound_ms,
                       "workload": s.base.workload.label}
                   for w, s in config.sweeps},
    }
    for rnd in range(config.rounds):
        for kind in config.names:
            argv = config.argv(kind)
            log(f"[round {rnd + 1}/{config.rounds}] starting {kind}: taskset -c "
                f"{config.server_cores or '(all)'} {shlex.join(argv)}")
            server = ServerProcess(argv, config.out_dir / "logs" / f"{kind}-r{rnd + 1}.log",
                                   port=config.port, cores=config.server_cores, env=env).start()
            _running.append(server)
            try:
                t0 = time.monotonic()
                await server.wait_ready(config.startup_timeout_s)
                log(f"  ready after {time.monotonic() - t0:.0f} s")
                for wi, (workload, sweep_cfg) in enumerate(config.sweeps):
                    base = replace(sweep_cfg.base, base_url=base_url, label=f"{kind} {workload}",
                                   first_image_number=(rnd * 10 + wi) * 100_000)
                    sweep = await run_sweep(replace(sweep_cfg, base=base), log=log)
                    result.add(workload, kind, sweep)
            except RuntimeError as e:
                log(f"  {kind} failed: {e}")
            finally:
                server.stop()
                _running.remove(server)
            try:  # partial results survive an interrupted comparison
                save(result, config.out_dir)
            except (OSError, ImportError, ValueError) as e:
                log(f"  could not save partial results: {e}")
    return result


def run_compare(config: CompareConfig, log: Any = None) -> int:
    """Run the comparison, print the tables, write outputs to ``config.out_dir``."""
    log = log or (lambda msg: print(msg, flush=True))
    if config.client_cores and hasattr(os, "sched_setaffinity"):
        cores = {int(c) for c in config.client_cores.split(",")}
        os.sched_setaffinity(0, cores)
    log(f"load generator on cores {sorted(os.sched_getaffinity(0))}; servers on "
        f"{config.server_cores or 'all cores'}; {os.cpu_count()} cores on this host")
    # Ctrl-C and SIGTERM both end the comparison through KeyboardInterrupt, stopping the server
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = asyncio.run(_compare(config, log))
    finally:
        for server in list(_running):
            server.stop(grace_s=10.0)
    paths = save(result, config.out_dir)
    log(format_summary_table(result))
    for p in paths:
        log(f"saved {p}")
    return 0 if result.sweeps else 1
