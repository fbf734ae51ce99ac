"""Why the server could not start, in one paragraph a person can act on.

A failed vLLM start surfaces in the frontend as ``RuntimeError: Engine core initialization
failed. See root cause above`` — the root cause is in a child process's traceback, in the engine
log. :func:`explain` reads the exception and that log, recognises the failures a user can fix
(memory, the model folder, the port, an architecture vLLM does not know) and says what failed,
the likely cause, and the flag or file to change. Anything else is named by its root-cause line.
"""

from __future__ import annotations

import contextlib
import errno
import re
from pathlib import Path

from edgeserve.encoder import EncoderError
from edgeserve.engine_memory import KVCacheTooSmall

# "ValueError: ...", "torch.OutOfMemoryError: ..." — the last line of a traceback
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")
_WORKER_ERROR = re.compile(r"Worker failed with error '(.+?)', please check")
_NOT_ROOT = ("Engine core initialization failed", "Worker failed with error")


class ModelFolderError(ValueError):
    """The model folder cannot be served (found before the engine starts)."""


def root_cause(exc: BaseException, log_text: str) -> str:
    """The innermost error message: from the engine log's tracebacks, else the exception."""
    m = _WORKER_ERROR.search(log_text) or _WORKER_ERROR.search(str(exc))
    if m:
        return m.group(1)
    for line in log_text.splitlines():
        hit = _ERROR_LINE.match(line.strip())
        if hit and not hit.group(2).startswith(_NOT_ROOT):
            return hit.group(2)
    return str(exc) or type(exc).__name__


def explain(exc: BaseException, log_path: Path | None, *, host: str = "", port: int = 0) -> str:
    """One paragraph: what failed, the likely cause, what to change."""
    where = f" Full log: {log_path} (or run with --verbose)." if log_path else ""
    if isinstance(exc, KVCacheTooSmall | ModelFolderError | EncoderError):
        return f"cannot start: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (f"cannot listen on {host}:{port}: the port is in use (another server is running "
                "there?). Stop it, or choose another port with --port.")
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES):
        return f"cannot listen on {host}:{port}: {exc.strerror}. Check --host and --port."
    log_text = ""
    if log_path is not None:
        with contextlib.suppress(OSError):
            log_text = log_path.read_text(errors="replace")
    cause = root_cause(exc, log_text)
    if "Available memory on node" in cause or "desired CPU memory utilization" in cause:
        return ("the vLLM engine could not allocate its KV cache: " + cause + " Lower "
                "--kv-cache-memory-bytes or --gpu-memory-utilization, or drop both so that "
                "edgeserve sizes the cache from the model and the node's free memory." + where)
    if "max seq len" in cause and "KV cache" in cause:
        return ("the KV cache is too small for one request of --max-model-len: " + cause +
                " Raise --kv-cache-memory-bytes or lower --max-model-len." + where)
    if "are not supported for now" in cause or "Cannot find model module" in cause:
        return ("vLLM does not know this model's architecture: " + cause + " edgeserve serves "
                "the Qwen-VL models this vLLM supports; check 'architectures' in the model "
                "folder's config.json or pass another --model." + where)
    if isinstance(exc, MemoryError) or "OutOfMemory" in cause or "Cannot allocate memory" in cause:
        return ("the engine ran out of memory while starting: " + cause + " Lower "
                "--max-model-len, --max-num-seqs or --kv-cache-memory-bytes, or stop other "
                "processes." + where)
    return f"the vLLM engine failed to start: {cause.rstrip('.')}." + where
