"""Does the default server keep answering while its processes are killed under it?

Starts ``edgeserve serve`` with no flags but ``--port`` (the configuration a user gets), finds the
rate it sustains (a closed-loop probe, or ``--sustainable-rate``) and offers ``--load-fraction``
of it as Poisson arrivals of photographs (``--images``, a new image in every request) for
``--duration`` seconds. Meanwhile:

* every ``--worker-kill-every-s`` seconds a preprocessing worker gets SIGKILL (a busy one when
  /health shows one, so that the image it holds must be preprocessed again: the pool starts a new
  worker and runs that image once more, and its client sees only a slower answer);
* once, at ``--engine-kill-at-s`` (or up to 10 s later, at the first moment /health shows the
  engine running a request), vLLM's EngineCore gets SIGKILL (found by psutil in the server's
  process tree); the server fails the requests the engine held with 503, starts a new
  engine and serves again.

The client behaves as a client should: an answer of 429 or 503 with ``Retry-After`` before any
byte of the stream (a refusal while the engine restarts, say) is sent again after that many
seconds, for up to ``--retry-for-s``; every answer is recorded. A /health poller records when the
server said not ready. Requests, answers and events stream to JSON Lines in ``--out``; the report
(``serve_chaos.json``) gives

* requests sent, succeeded, failed, by status code, every 503 with its reason;
* requests **lost**: no answer at all (a transport failure, a stream cut off without an error,
  or no answer by the end) — must be 0;
* images the server preprocessed again after their worker was killed
  (``edgeserve_preproc_retries_total``), next to the busy workers killed;
* whether every failure is a 503 of a request the engine held when it died (the only failures
  allowed);
* the time from the engine's death until a request sent after it succeeds, until /health
  said ready again, and the restart's duration by the server's own line;
* /dev/shm: the server's segments and vLLM's queues the dead engine left behind, and what is
  left once the server has stopped — must be nothing.

A PNG timeline (request outcomes over time, the kills, the not-ready span) goes next to it.

    python benchmarks/serve_chaos.py                 # 180 s of load, about 5 min in all
    python benchmarks/serve_chaos.py --short         # 60 s, a worker every 15 s: to try it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_soak import BodyMaker, drive

from edgeserve.bench.client import RequestResult, send_chat
from edgeserve.bench.runner import chat_url, fetch_model_id
from edgeserve.bench.server_process import ServerProcess
from edgeserve.bench.workload import WorkloadConfig

SHM = Path("/dev/shm")
RETRYABLE = (429, 503)
ENGINE_BUSY_WAIT_S = 10.0


def vllm_queues() -> set[str]:
    """vLLM's shared-memory queues (``psm_*``) in /dev/shm now."""
    return {p.name for p in SHM.glob("psm_*")}


def server_segments(pid: int) -> list[str]:
    """edgeserve's own segments (images between frontend and workers) of the server ``pid``."""
    return sorted(p.name for p in SHM.glob(f"edgeserve_{pid}_*"))


def engine_core(pid: int) -> psutil.Process | None:
    """vLLM's EngineCore in the process tree of the server ``pid`` (its title is
    ``VLLM::EngineCore``, cut to 15 characters by the kernel)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    for c in children:
        try:
            if c.name().startswith("VLLM::EngineCor"):
                return c
        except psutil.Error:
            continue
    return None


def get_health(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read() or b"{}")
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return 0, {}


class EventLog:
    """Events (kills, /health changes) as JSON Lines, from several threads."""

    def __init__(self, path: Path, t0: float) -> None:
        self.f, self.t0 = path.open("w"), t0
        self.guard = threading.Lock()

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"t_s": round(time.perf_counter() - self.t0, 3), "kind": kind, **fields})
        with self.guard:
            self.f.write(line + "\n")
            self.f.flush()

    def close(self) -> None:
        self.f.close()


class HealthWatch(threading.Thread):
    """Polls /health every ``interval_s``; logs each change of its status code."""

    def __init__(self, url: str, events: EventLog, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.url, self.events, self.interval_s = url, events, interval_s
        self.stop = threading.Event()

    def run(self) -> None:
        last = None
        while not self.stop.is_set():
            status, body = get_health(self.url)
            if status != last:
                self.events.write("health", status=status, error=body.get("error", ""))
                last = status
            self.stop.wait(self.interval_s)


class Killer(threading.Thread):
    """SIGKILLs a preprocessing worker every ``every_s`` and the EngineCore once at
    ``engine_at_s`` (seconds since the load started)."""

    def __init__(self, server: ServerProcess, events: EventLog, every_s: float,
                 engine_at_s: float, duration_s: float, queues_before: set[str]) -> None:
        super().__init__(daemon=True)
        self.queues_before = queues_before  # vLLM queues of other servers, not this engine's
        self.server, self.events = server, events
        self.every_s, self.engine_at_s, self.duration_s = every_s, engine_at_s, duration_s
        self.stop = threading.Event()
        self.dead_engine_queues: set[str] = set()

    def run(self) -> None:
        start = time.perf_counter()
        plan = sorted([(k * self.every_s, "worker") for k in range(1, int(self.duration_s
                       // self.every_s) + 1) if k * self.every_s < self.duration_s]
                      + [(self.engine_at_s, "engine")])
        for at_s, what in plan:
            if self.stop.wait(max(0.0, start + at_s - time.perf_counter())):
                return
            if what == "worker":
                self.kill_worker()
            else:
                self.kill_engine()

    def kill_worker(self) -> None:
        _, body = get_health(self.server.url)
        workers = [w for w in body.get("workers", []) if w.get("pid")]
        if not workers:
            self.events.write("worker_kill_skipped", reason="no worker listed by /health")
            return
        busy = [w for w in workers if w.get("busy")]
        w = (busy or workers)[0]
        try:
            os.kill(int(w["pid"]), signal.SIGKILL)
            self.events.write("worker_kill", pid=w["pid"], index=w.get("index"),
                              busy=bool(w.get("busy")))
        except ProcessLookupError:
            self.events.write("worker_kill_skipped", reason=f"pid {w['pid']} already gone")

    def kill_engine(self) -> None:
        # at the first moment the engine holds a request (up to ENGINE_BUSY_WAIT_S): its death
        # then has requests to fail, the case under test
        deadline = time.perf_counter() + ENGINE_BUSY_WAIT_S
        running = 0
        while time.perf_counter() < deadline and not self.stop.is_set():
            running = int(get_health(self.server.url)[1].get("engine", {}).get("running", 0))
            if running:
                break
            time.sleep(0.05)
        core = engine_core(self.server.pid)
        if core is None:
            self.events.write("engine_kill_skipped", reason="no EngineCore in the process tree")
            return
        self.dead_engine_queues = vllm_queues() - self.queues_before
        core.kill()
        self.events.write("engine_kill", pid=core.pid, engine_running=running)


def reason_of(r: RequestResult) -> str:
    """The server's message for a failed answer (the JSON error's message), else the error."""
    text = r.error
    for prefix in ("HTTP ", "stream error: "):
        if text.startswith(prefix):
            body = text.split(": ", 1)[1] if prefix == "HTTP " else text[len(prefix):]
            try:
                err = json.loads(body).get("error", {})
                return str(err.get("message", body))[:200]
            except (ValueError, AttributeError):
                import ast

                try:
                    return str(ast.literal_eval(body).get("message", body))[:200]
                except (ValueError, SyntaxError, AttributeError):
                    return body[:200]
    return text[:200]


def answer_record(i: int, attempt: int, r: RequestResult, t0: float, end_s: float) -> dict[str, Any]:
    """One answer (attempt) of request ``i`` as a JSON line; ``code`` 0 means no answer."""
    if r.ok and r.stream_done:
        outcome, code = "ok", 200
    elif r.error_code:
        outcome, code = "failed", r.error_code
    else:  # no status, or a stream that ended without [DONE] and without an error
        outcome, code = "lost", 0
    return {"i": i, "attempt": attempt, "sent_s": round(r.start_s - t0, 4),
            "end_s": round(end_s - t0, 4), "outcome": outcome, "code": code,
            "in_stream": r.http_status == 200 and outcome == "failed",
            "reason": "" if outcome == "ok" else reason_of(r),
            "retry_after_s": r.retry_after_s, "ttft_s": round(r.ttft_s, 5) if r.ok else None}


async def load(url: str, rate_rps: float, duration_s: float, workload: WorkloadConfig,
               answers_path: Path, t0: float, retry_for_s: float, seed: int = 7) -> int:
    """Poisson arrivals at ``rate_rps`` for ``duration_s``; each answer to ``answers_path``.
    Refusals with Retry-After are sent again for up to ``retry_for_s``. Returns how many
    requests never got a final answer (still open ``retry_for_s`` + 120 s after the last
    send)."""
    import aiohttp

    model = await fetch_model_id(url)
    maker = BodyMaker(workload, model, ahead=max(8, int(rate_rps * 5)))
    maker.start()
    while maker.q.qsize() < min(8, maker.q.maxsize):
        await asyncio.sleep(0.1)
    rng = np.random.default_rng(seed)
    sink = answers_path.open("w")
    tasks: set[asyncio.Task[None]] = set()
    open_requests: set[int] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        chat = chat_url(url)

        async def one(i: int, body: bytes) -> None:
            open_requests.add(i)
            first_s = time.perf_counter()
            attempt = 0
            while True:
                r = RequestResult(index=i)
                await send_chat(session, chat, body, r)
                rec = answer_record(i, attempt, r, t0, time.perf_counter())
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                again = (rec["outcome"] == "failed" and not rec["in_stream"]
                         and rec["code"] in RETRYABLE and r.retry_after_s is not None
                         and time.perf_counter() + r.retry_after_s - first_s < retry_for_s)
                if not again:
                    break
                await asyncio.sleep(r.retry_after_s or 1.0)
                attempt += 1
            open_requests.discard(i)

        start = time.perf_counter()
        next_s, i = 0.0, 0
        while next_s < duration_s:
            delay = start + next_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = await asyncio.to_thread(maker.q.get)
            t = asyncio.create_task(one(i, body))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            i += 1
            next_s += float(rng.exponential(1.0 / rate_rps))
        maker.stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=retry_for_s + 120)
        unanswered = len(open_requests)
        for t in tasks:
            t.cancel()
    for j in sorted(open_requests):  # no answer by the end: lost
        sink.write(json.dumps({"i": j, "attempt": -1, "sent_s": None, "end_s": None,
                               "outcome": "lost", "code": 0, "in_stream": False,
                               "reason": "no answer by the end",
                               "retry_after_s": None, "ttft_s": None}) + "\n")
    sink.close()
    return unanswered


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.open() if line.strip()]


def summarize(answers: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    """The report from the recorded answers and events (times: seconds since the load began)."""
    by_request: dict[int, list[dict[str, Any]]] = {}
    for a in answers:
        by_request.setdefault(a["i"], []).append(a)
    finals = {i: max(v, key=lambda a: a["attempt"] if a["attempt"] >= 0 else 1e9)
              for i, v in by_request.items()}
    first_sent = {i: min((a["sent_s"] for a in v if a["sent_s"] is not None), default=None)
                  for i, v in by_request.items()}
    kill = next((e for e in events if e["kind"] == "engine_kill"), None)
    kill_s = kill["t_s"] if kill else None
    failed = [a for a in finals.values() if a["outcome"] == "failed"]
    lost = [a for a in finals.values() if a["outcome"] == "lost"]

    def held_by_dead_engine(a: dict[str, Any]) -> bool:
        sent_s = first_sent[a["i"]]
        return (kill_s is not None and a["code"] == 503 and sent_s is not None
                and sent_s <= kill_s <= a["end_s"])

    not_allowed = [a for a in failed if not held_by_dead_engine(a)]
    answers_by_code = Counter(str(a["code"]) for a in answers)
    reasons_503 = Counter(a["reason"] for a in answers if a["code"] == 503)
    first_ok_after = None
    if kill_s is not None:
        oks = [a for a in answers if a["outcome"] == "ok" and a["sent_s"] >= kill_s]
        if oks:
            first = min(oks, key=lambda a: a["end_s"])
            first_ok_after = {"sent_s_after_kill": round(first["sent_s"] - kill_s, 3),
                              "succeeded_s_after_kill": round(first["end_s"] - kill_s, 3)}
    not_ready = [e for e in events if e["kind"] == "health" and e["status"] != 200
                 and kill_s is not None and e["t_s"] >= kill_s]
    ready_again = [e for e in events if e["kind"] == "health" and e["status"] == 200
                   and not_ready and e["t_s"] > not_ready[0]["t_s"]]
    return {
        "requests_sent": len(finals),
        "answers": len(answers),
        "succeeded": sum(a["outcome"] == "ok" for a in finals.values()),
        "succeeded_after_retry": sum(a["outcome"] == "ok" and a["attempt"] > 0
                                     for a in finals.values()),
        "failed": len(failed),
        "failed_by_code": dict(Counter(str(a["code"]) for a in failed)),
        "failed_reasons": dict(Counter(f"{a['code']}: {a['reason']}" for a in failed)),
        "answers_by_code": dict(answers_by_code),
        "answers_503_by_reason": dict(reasons_503),
        "lost": len(lost),
        "lost_detail": [f"request {a['i']}: {a['reason']}" for a in lost][:20],
        "failed_held_by_dead_engine": len(failed) - len(not_allowed),
        # 500s of images whose worker died on both attempts (one death is retried unseen)
        "failed_with_a_killed_worker": sum(a["code"] == 500 and "preprocessing worker" in
                                           a["reason"] and "died" in a["reason"] for a in failed),
        "failures_not_allowed": len(not_allowed),
        "failures_not_allowed_detail": [f"request {a['i']} sent at {first_sent[a['i']]} s: "
                                        f"{a['code']} {a['reason']}" for a in not_allowed][:20],
        "worker_kills": sum(e["kind"] == "worker_kill" for e in events),
        "worker_kills_busy": sum(e["kind"] == "worker_kill" and e["busy"] for e in events),
        "engine_killed_at_s": kill_s,
        "engine_running_at_kill": kill.get("engine_running") if kill else None,
        "first_success_after_engine_death": first_ok_after,
        "health_not_ready_s_after_kill": (round(not_ready[0]["t_s"] - kill_s, 3)
                                          if not_ready and kill_s is not None else None),
        "health_ready_again_s_after_kill": (round(ready_again[0]["t_s"] - kill_s, 3)
                                            if ready_again and kill_s is not None else None),
    }


def verdict(summary: dict[str, Any]) -> list[str]:
    """What the run shows against its goals, one line each (prefixed ``ok`` or ``FAIL``)."""
    shm = summary.get("shm", {})
    checks = [
        (summary["lost"] == 0, f"requests lost: {summary['lost']} (goal 0)"),
        (summary["failures_not_allowed"] == 0,
         f"failures other than the dead engine's held requests (503): "
         f"{summary['failures_not_allowed']} (goal 0)"),
        (summary["engine_killed_at_s"] is not None
         and summary["first_success_after_engine_death"] is not None,
         f"served again after the engine's death: {summary['first_success_after_engine_death']}"),
        (not shm.get("left_after_stop") and not shm.get("dead_engine_queues_left"),
         f"/dev/shm left behind: {shm.get('left_after_stop')} after stop, dead engine's queues "
         f"{shm.get('dead_engine_queues_left')}"),
    ]
    return [f"{'ok  ' if good else 'FAIL'} {text}" for good, text in checks]


def plot(answers: list[dict[str, Any]], events: list[dict[str, Any]], duration_s: float,
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(12, 6), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 1]})
    ok = [a for a in answers if a["outcome"] == "ok"]
    ax.scatter([a["sent_s"] for a in ok], [a["ttft_s"] for a in ok], s=8, color="tab:green",
               label="succeeded (TTFT)")
    top = max([a["ttft_s"] for a in ok] + [1.0]) * 1.15
    last_attempt: dict[int, int] = {}
    for a in answers:
        last_attempt[a["i"]] = max(last_attempt.get(a["i"], -1), a["attempt"])
    final = [a for a in answers if a["attempt"] == last_attempt[a["i"]] and a["attempt"] >= 0]
    first_sent = {a["i"]: a["sent_s"] for a in answers if a["attempt"] == 0}
    refused = [a for a in answers if a["attempt"] < last_attempt[a["i"]]]
    if refused:
        ax.scatter([a["sent_s"] for a in refused], [top * 0.95] * len(refused), marker="|",
                   color="tab:orange", label="refused (429/503 + Retry-After), sent again")
    colors = {503: "tab:red", 429: "tab:orange", 500: "tab:purple"}
    for code in sorted({a["code"] for a in final if a["outcome"] == "failed"}):
        xs = [first_sent[a["i"]] for a in final if a["outcome"] == "failed" and a["code"] == code]
        ax.scatter(xs, [top] * len(xs), marker="x", color=colors.get(code, "black"),
                   label=f"failed: {code}")
    lost = [a for a in answers if a["outcome"] == "lost" and a["sent_s"] is not None]
    if lost:
        ax.scatter([a["sent_s"] for a in lost], [top * 1.05] * len(lost), marker="v",
                   color="black", label="lost (no answer)")
    for e in events:
        if e["kind"] == "worker_kill":
            for a_ in (ax, bx):
                a_.axvline(e["t_s"], color="grey", ls="--", lw=0.8)
        elif e["kind"] == "engine_kill":
            for a_ in (ax, bx):
                a_.axvline(e["t_s"], color="tab:red", lw=1.2)
    down = None
    for e in events:
        if e["kind"] != "health":
            continue
        if e["status"] != 200 and down is None:
            down = e["t_s"]
        elif e["status"] == 200 and down is not None:
            ax.axvspan(down, e["t_s"], color="tab:red", alpha=0.1)
            down = None
    end_s = max([a["end_s"] for a in answers if a["end_s"] is not None] + [duration_s])
    if down is not None:
        ax.axvspan(down, end_s, color="tab:red", alpha=0.1)
    ax.plot([], [], color="grey", ls="--", label="worker SIGKILL")
    ax.plot([], [], color="tab:red", label="EngineCore SIGKILL")
    ax.fill_between([], [], color="tab:red", alpha=0.1, label="/health not ready")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("edgeserve serve (defaults) under load while its processes are killed")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    bins = np.arange(0, end_s + 5, 5.0)
    bx.hist([[a["end_s"] for a in answers if a["outcome"] == "ok"],
             [a["end_s"] for a in refused],
             [a["end_s"] for a in final if a["outcome"] != "ok" and a["end_s"] is not None]],
            bins=bins, stacked=True, color=["tab:green", "tab:orange", "tab:red"],
            label=["succeeded", "refused, sent again", "failed or lost"])
    bx.set_ylabel("answers / 5 s")
    bx.set_xlabel("seconds since the load started")
    bx.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def probe_rate(url: str, workload: WorkloadConfig, probe_s: float, concurrency: int) -> float:
    """Requests per second the server completes with ``concurrency`` in flight."""
    results = asyncio.run(drive(url, rate_rps=None, concurrency=concurrency, duration_s=probe_s,
                                workload=workload, results_path=None, t0=time.perf_counter()))
    done = [r for r in results if r.ok]
    if len(done) < 2:
        raise RuntimeError(f"the probe completed {len(done)} requests; give --sustainable-rate")
    span = max(r.start_s + r.e2e_s for r in done) - min(r.start_s for r in done)
    return len(done) / span


def default_engine_kill_s(duration_s: float, every_s: float) -> float:
    """Half-way between the two worker kills around the middle of the run."""
    return (int(duration_s / 2 // every_s) + 0.5) * every_s


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=180.0, help="seconds of load (default 180)")
    p.add_argument("--worker-kill-every-s", type=float, default=30.0,
                   help="SIGKILL a preprocessing worker this often, in seconds (default 30)")
    p.add_argument("--engine-kill-at-s", type=float,
                   help="SIGKILL vLLM's EngineCore this many seconds into the load (default: "
                        "half-way between the worker kills around the middle)")
    p.add_argument("--short", action="store_true",
                   help="a try-out: 60 s of load, a worker every 15 s, a 15 s probe")
    p.add_argument("--images", default="1mp", help="edgeserve bench --images mix (default 1mp)")
    p.add_argument("--output-len", default="16", help="output tokens per request (default 16)")
    p.add_argument("--sustainable-rate", type=float, help="req/s; default: measured by a probe")
    p.add_argument("--probe-s", type=float, default=30.0, help="seconds of the rate probe (default 30)")
    p.add_argument("--probe-concurrency", type=int, default=4,
                   help="requests in flight during the probe (default 4)")
    p.add_argument("--load-fraction", type=float, default=0.6,
                   help="offered rate as a fraction of the sustainable one (default 0.6)")
    p.add_argument("--retry-for-s", type=float, default=300.0,
                   help="send a refused request (429/503 with Retry-After, before its stream "
                        "began) again for up to this many seconds; 0: never (default 300)")
    p.add_argument("--out", type=Path, default=Path("results/serve_chaos"),
                   help="folder for the JSON Lines, the report and the PNG "
                        "(default results/serve_chaos)")
    args = p.parse_args(argv)
    if args.short:
        args.duration, args.worker_kill_every_s, args.probe_s = 60.0, 15.0, 15.0
    if args.engine_kill_at_s is None:
        args.engine_kill_at_s = default_engine_kill_s(args.duration, args.worker_kill_every_s)
    if not 0 < args.engine_kill_at_s < args.duration:
        p.error(f"--engine-kill-at-s {args.engine_kill_at_s:g} is not inside the "
                f"{args.duration:g} s of load")
    if args.worker_kill_every_s <= 0 or not 0 < args.load_fraction <= 1:
        p.error("--worker-kill-every-s must be > 0 and --load-fraction in (0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    workload = WorkloadConfig(sizes=args.images, output_len=args.output_len)
    queues_before = vllm_queues()
    server = ServerProcess.edgeserve([], out / "server.log").start().ready(timeout_s=600)
    events_path, answers_path = out / "events.jsonl", out / "answers.jsonl"
    shm: dict[str, Any] = {}
    preproc_retries = 0.0
    try:
        rate = args.sustainable_rate
        if rate is None:
            print(f"probe: {args.probe_concurrency} in flight for {args.probe_s:g} s …", flush=True)
            rate = probe_rate(server.url, workload, args.probe_s, args.probe_concurrency)
            print(f"probe: sustainable {rate:.2f} req/s", flush=True)
        offered = args.load_fraction * rate
        print(f"load: {offered:.2f} req/s of {args.images} for {args.duration:g} s; a worker "
              f"killed every {args.worker_kill_every_s:g} s, the EngineCore at "
              f"{args.engine_kill_at_s:g} s …", flush=True)
        t0 = time.perf_counter()
        events = EventLog(events_path, t0)
        health = HealthWatch(server.url, events)
        killer = Killer(server, events, args.worker_kill_every_s, args.engine_kill_at_s,
                        args.duration, queues_before)
        health.start()
        killer.start()
        asyncio.run(load(server.url, offered, args.duration, workload, answers_path, t0,
                         args.retry_for_s))
        killer.stop.set()
        health.stop.set()
        health.join()
        killer.join()
        events.close()
        time.sleep(2.0)  # the last requests' segments are unlinked as their handlers finish
        preproc_retries = server.metric("edgeserve_preproc_retries_total")
        shm["server_segments_at_end"] = server_segments(server.pid)
        shm["dead_engine_queues"] = sorted(killer.dead_engine_queues)
        shm["dead_engine_queues_left"] = sorted(killer.dead_engine_queues & vllm_queues())
    finally:
        pid = server.pid
        code = server.stop()
    shm["left_after_stop"] = sorted((vllm_queues() - queues_before) | set(server_segments(pid)))
    summary = summarize(read_jsonl(answers_path), read_jsonl(events_path))
    restarted = re.search(r"a new vLLM engine serves \(restart \d+, ([0-9.]+) s after",
                          server.log_path.read_text(errors="replace"))
    summary |= {"shm": shm, "server_exit_code": code, "preproc_retries": preproc_retries,
                "server_restart_s": float(restarted[1]) if restarted else None, "sustainable_rps": round(rate, 3),
                "offered_rps": round(offered, 3), "images": args.images,
                "duration_s": args.duration, "worker_kill_every_s": args.worker_kill_every_s,
                "loadavg_1m_after": os.getloadavg()[0]}
    summary["verdict"] = verdict(summary)
    (out / "serve_chaos.json").write_text(json.dumps(summary, indent=1))
    plot(read_jsonl(answers_path), read_jsonl(events_path), args.duration,
         out / "serve_chaos.png")
    print(json.dumps(summary, indent=1))
    print("\n".join(summary["verdict"]))
    print(f"wrote {out / 'serve_chaos.json'} and {out / 'serve_chaos.png'}")
    return 0 if all(v.startswith("ok") for v in summary["verdict"]) else 1


if __name__ == "__main__":
    sys.exit(main())
