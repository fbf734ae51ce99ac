"""``edgeserve serve`` starting as a new user starts it: no flags, any machine.

The default server (no KV-cache flag, the built-in tiny model) sizes its KV cache from the model,
says how in its start-up lines, and answers an image request. A start that cannot work — a KV
cache larger than the machine, a folder that is not a model, a port in use — ends with status 1
and one paragraph on the terminal naming what to change (vLLM's tracebacks stay in the engine
log), and leaves nothing behind: no shared-memory segment, no process of its tree.
"""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import psutil
import pytest
from PIL import Image

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess
from edgeserve.config import default_workers
from edgeserve.hardware import Platform, detect
from edgeserve.net import free_port

pytestmark = pytest.mark.engine


def shm_names() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()}


def new_segments(before: set[str], grace_s: float = 10.0) -> set[str]:
    """Segments not there ``before`` that are still there ``grace_s`` after the server exited
    (Python's resource tracker, the server's child, unlinks what it tracked a moment later)."""
    deadline = time.monotonic() + grace_s
    while (left := shm_names() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def processes_marked(mark: str, grace_s: float = 10.0) -> list[str]:
    """Processes whose environment carries ``mark`` (a server's whole tree inherits it) that are
    still alive ``grace_s`` after the server exited (Python's resource tracker, a child of the
    server, takes a moment to see its parent gone)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for p in psutil.process_iter():
            try:
                if p.environ().get("EDGESERVE_TEST_MARK") == mark:
                    found.append(" ".join(p.cmdline()))
            except psutil.Error:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def run_serve(*args: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    """Run ``edgeserve serve`` to completion; returns (result, engine log, mark)."""
    mark = uuid.uuid4().hex
    log = tmp_path / "engine.log"
    env = dict(os.environ, EDGESERVE_TEST_MARK=mark, PYTHONUNBUFFERED="1")
    done = subprocess.run([sys.executable, "-m", "edgeserve", "serve", "--engine-log", str(log),
                           *args], capture_output=True, text=True, env=env, timeout=300)
    return done, log, mark


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory,
                   tiny_model_dir: Path) -> Iterator[ServerProcess]:
    # only --port (two servers of the suite may not share one) and --trace (to read the engine
    # steps it records; it changes nothing the engine does): everything else is the default
    d = tmp_path_factory.mktemp("default")
    srv = ServerProcess.edgeserve(["--trace", str(d / "trace.jsonl")], d / "server.log").start().ready()
    yield srv
    srv.stop()


def trace_header(trace: Path, timeout_s: float = 10.0) -> records.TraceHeader:
    """The trace's header, once the server has flushed it (on its first resource sample, a
    second after ready, which a test right after start-up can precede)."""
    deadline = time.monotonic() + timeout_s
    while True:
        header = next(records.read_trace(trace), None)
        if isinstance(header, records.TraceHeader) or time.monotonic() > deadline:
            assert isinstance(header, records.TraceHeader)
            return header
        time.sleep(0.2)


def this_machines_dtype() -> str:
    """The dtype the default server chooses here (vLLM's CPU build; test_auto_defaults.py)."""
    return "bfloat16" if detect(Platform.CPU).bf16_feature else "float32"


def test_the_default_server_states_its_dtype_encoder_render_and_wait_choices_with_reasons(
    default_server: ServerProcess, tiny_model_dir: Path,
) -> None:
    lines = [x.removeprefix("edgeserve serve: ")
             for x in default_server.log_path.read_text().splitlines()]
    hw = detect(Platform.CPU)
    assert f"machine: {hw.describe()}" in lines
    dtype = next(x for x in lines if x.startswith("dtype "))
    assert dtype.startswith(f"dtype {this_machines_dtype()}: vLLM's CPU build on a CPU ")
    assert dtype.endswith("(override: --dtype)")
    # the tiny model has its export (MODEL/onnx): the workers run the tower on vLLM's CPU build
    encoder = next(x for x in lines if x.startswith("encoder "))
    assert encoder.startswith("encoder onnx: the exported tower on ONNX Runtime in the workers")
    assert next(x for x in lines if x.startswith("vision encoder: ")).startswith(
        f"vision encoder: {tiny_model_dir / 'onnx' / 'encoder.onnx'} on ONNX Runtime")
    # vLLM's CPU build: one render thread, said so, and the processor cache stays on
    render = next(x for x in lines if x.startswith("frontend render threads "))
    assert render.startswith("frontend render threads 1: vLLM's CPU build")
    assert any(x.startswith("multimodal processor cache capped at ") for x in lines)
    # vLLM's CPU build: its engine processes sleep between messages instead of spinning, and the
    # plugin that makes them is installed (no line saying it will not load)
    wait = next(x for x in lines if x.startswith("engine wait "))
    assert wait.startswith("engine wait sleep: 50 us sleeps instead of vLLM's sched_yield spin")
    assert not any("will not load edgeserve's plugin" in x for x in lines)
    ready = next(x for x in lines if x.startswith("ready on "))
    assert f"workers={default_workers(encoder_on_cpu=True)}" in ready


def test_the_default_server_sizes_its_kv_cache_from_the_model_and_says_how(
    default_server: ServerProcess,
) -> None:
    log = default_server.log_path.read_text()
    line = next(x for x in log.splitlines() if x.startswith("edgeserve serve: KV cache"))
    # the tiny model: 16 seqs × 4096 tokens × 512 B/token (bfloat16; 1024 in float32) = 32 MiB
    # (64 MiB), well under any node's cap
    per_token, mib = (512, "32.0") if this_machines_dtype() == "bfloat16" else (1024, "64.0")
    assert f"{mib} MiB (65536 tokens, budget)" in line
    assert f"{per_token} B/token" in line and f"({this_machines_dtype()})" in line
    assert "node 0 available" in line
    assert "multimodal processor cache capped at" in log
    # vLLM's own output went to the engine log, not to the terminal
    assert "Traceback" not in log and "INFO" not in log


def test_the_default_server_runs_vllms_engine_core_on_its_model_workers_cores(
    default_server: ServerProcess,
) -> None:
    """vLLM's CPU build binds its model worker to fewer cores than the host has; the EngineCore,
    which spin-waits while a step runs, is moved beside it, every thread of it."""
    import psutil

    children = psutil.Process(default_server.proc.pid).children(recursive=True)
    core = next(c for c in children if "EngineCore" in c.name())
    worker = next(c for c in children if c.name().startswith("VLLM::Worker"))
    worker_cores = set(worker.cpu_affinity())
    if len(os.sched_getaffinity(0)) > len(worker_cores):
        for t in core.threads():
            assert os.sched_getaffinity(t.id) == worker_cores, t.id
        assert "vLLM's EngineCore" in default_server.log_path.read_text()
    else:  # vLLM gave its worker every core: nothing to move
        assert set(core.cpu_affinity()) == os.sched_getaffinity(0)


def test_the_default_server_answers_an_image_request(default_server: ServerProcess) -> None:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)).save(buf, "JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    client = openai.OpenAI(base_url=default_server.url + "/v1", api_key="-")
    out = client.chat.completions.create(
        model=default_server.get_json("/v1/models")["data"][0]["id"], max_tokens=5,
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                               {"type": "text", "text": "What is it?"}]}])
    assert out.usage is not None and out.usage.completion_tokens == 5
    # 640×480 → smart_resize 644×476 → 23×17 patches of 28 px: 391 image tokens
    assert out.usage.prompt_tokens > 391
    USAGE.append((out.usage.prompt_tokens, out.usage.completion_tokens))


USAGE: list[tuple[int, int]] = []  # (prompt, completion) tokens of the requests sent above


def test_the_trace_records_every_engine_step_of_that_request(
    default_server: ServerProcess,
) -> None:
    """The one request's prompt was computed in prefill steps (nothing cached before it) and its
    tokens after the first in decode steps, one per step; the encoder ran its image tokens."""
    assert len(USAGE) == 1, "runs after the image request"
    prompt, completion = USAGE[0]
    trace = Path(default_server.argv[default_server.argv.index("--trace") + 1])
    header = trace_header(trace)
    deadline = time.monotonic() + 10
    warm_end_t_s = header.meta["warmup"]["end_t_s"]  # type: ignore[index]
    while True:
        steps = [x for x in records.read_trace(trace)
                 if isinstance(x, records.EngineStep) and x.t_s > warm_end_t_s]
        if sum(s.decode_tokens for s in steps) >= completion - 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sum(s.prefill_tokens for s in steps) == prompt
    assert sum(s.decode_tokens for s in steps) == completion - 1
    assert all(s.decode_tokens == s.decode_requests for s in steps)
    # the image's 391 tokens go through the engine's encoder schedule whether its tower runs
    # there or the workers hand it their embeddings (the default on vLLM's CPU build)
    assert sum(s.encoder_tokens for s in steps) == 391
    assert all(s.duration_s > 0 for s in steps)
    assert [s.t_s for s in steps] == sorted(s.t_s for s in steps)
    assert header.meta["dtype"] == this_machines_dtype()
    assert header.meta["engine"]["max_num_seqs"] == 16  # type: ignore[index]
    assert header.meta["engine"]["kv_cache_tokens"] == 65536  # type: ignore[index]
    assert header.meta["host_cores"] == len(os.sched_getaffinity(0))
    assert set(header.meta["processes"]) >= {"frontend", "worker0", "engine"}  # type: ignore[arg-type]


def test_the_default_server_warms_up_before_it_is_ready(default_server: ServerProcess,
                                                        tiny_model_dir: Path) -> None:
    """Image requests of the largest size (one per worker) and of the common sizes, and a
    text-only one, ran through the workers and the engine before /health first answered; the
    start-up lines say how long they took, and the trace keeps their steps before the header's
    ``warmup.end_t_s``."""
    from mm_preproc.smart_resize import smart_resize
    from mm_preproc.spec import read_spec

    lines = [x.removeprefix("edgeserve serve: ")
             for x in default_server.log_path.read_text().splitlines()]
    warm = next(i for i, x in enumerate(lines) if x.startswith("warm-up: "))
    assert warm < next(i for i, x in enumerate(lines) if x.startswith("ready on "))
    assert lines[warm].endswith(" s before ready")
    trace = Path(default_server.argv[default_server.argv.index("--trace") + 1])
    meta = trace_header(trace).meta["warmup"]
    assert isinstance(meta, dict)
    steps = [x for x in records.read_trace(trace) if isinstance(x, records.EngineStep)]
    warm_steps = [s for s in steps if s.t_s <= meta["end_t_s"]]
    # the trace's first steps are the warm-up's, and they precede the ready time
    assert warm_steps and steps[0] is warm_steps[0]
    assert meta["start_t_s"] < warm_steps[0].t_s <= meta["end_t_s"] < default_server.ready_t_s
    # /health gave no answer while the warm-up ran
    assert default_server.last_refused_t_s > warm_steps[0].t_s
    # the images it sent: the largest (a 4:3 photograph at max_pixels) once per worker, then the
    # web sizes and a 1 MP photograph, each resized as a user's image is
    spec = read_spec(tiny_model_dir)

    def tokens(w: int, h: int) -> int:
        th, tw = smart_resize(h, w, spec.factor, spec.min_pixels, spec.max_pixels)
        return spec.tokens(th, tw)

    workers = default_workers(encoder_on_cpu=True)
    common = [(448, 448), (640, 480), (800, 600), (1024, 768), (1280, 800)]
    assert meta["largest_tokens"] == tokens(4000, 3000) <= spec.max_pixels // spec.factor ** 2
    assert sum(s.encoder_tokens for s in warm_steps) == (
        workers * tokens(4000, 3000) + sum(tokens(w, h) for w, h in common))
    assert meta["requests"] == workers + len(common) + 1
    assert sum(s.decode_tokens for s in warm_steps) == meta["requests"]  # 2 tokens each


def test_an_impossible_kv_cache_fails_in_one_paragraph_and_leaves_nothing(
    tmp_path: Path, tiny_model_dir: Path,
) -> None:
    before = shm_names()
    port = free_port()
    done, log, mark = run_serve("--port", str(port), "--kv-cache-memory-bytes", str(1 << 50),
                                tmp_path=tmp_path)
    assert done.returncode == 1
    err = done.stderr.strip()
    assert err.startswith("edgeserve serve: the vLLM engine could not allocate its KV cache")
    assert "--kv-cache-memory-bytes" in err and str(log) in err
    assert len(err.splitlines()) == 1 and "Traceback" not in done.stdout + done.stderr
    assert "Traceback" in log.read_text()  # the details are kept, in the log
    assert new_segments(before) == set()
    assert processes_marked(mark) == []


def test_a_folder_that_is_not_a_model_is_named_before_the_engine_starts(tmp_path: Path) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    before = shm_names()
    done, _, mark = run_serve("--model", str(empty), "--port", str(free_port()), tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"edgeserve serve: cannot start: {empty} is not a model folder: it has no config.json. "
        "Pass --model DIR of a Hugging Face-format checkpoint, or build the default with "
        "`edgeserve models build-tiny`.")
    assert new_segments(before) == set()
    assert processes_marked(mark) == []


def test_a_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    done, _, _ = run_serve("--model", str(tmp_path / "nowhere"), tmp_path=tmp_path)
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "edgeserve models build-tiny" in done.stderr


def test_a_port_in_use_fails_at_once_naming_the_flag(tmp_path: Path, tiny_model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done, _, mark = run_serve("--port", str(port), tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"edgeserve serve: cannot listen on 127.0.0.1:{port}: the port is in use (another "
        "server is running there?). Stop it, or choose another port with --port.")
    assert processes_marked(mark) == []
