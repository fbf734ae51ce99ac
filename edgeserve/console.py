"""What ``edgeserve serve`` prints, apart from what the vLLM engine prints.

vLLM logs a few hundred lines while it starts and, when it fails, a traceback from each of its
processes (the frontend, EngineCore, the model worker). Those are for the log, not for the person
at the terminal. :func:`engine_output_to` points the process's file descriptors 1 and 2 at the
engine log — so vLLM's loggers, the processes it spawns (which inherit them), torch's warnings and
Python's resource tracker all write there — while edgeserve's own lines (:func:`say`) keep going to
the terminal through copies of the original descriptors. With ``--verbose`` nothing is redirected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

_console: tuple[TextIO, TextIO] | None = None  # the terminal (out, err) while redirected


def say(line: str, *, error: bool = False) -> None:
    """One line of edgeserve's own output: ``edgeserve serve: <line>`` on the terminal."""
    out, err = _console if _console is not None else (sys.stdout, sys.stderr)
    stream = err if error else out
    print(f"edgeserve serve: {line}", file=stream, flush=True)


class ConsoleHandler(logging.Handler):
    """Routes the ``edgeserve`` loggers' records through :func:`say` (warnings to stderr)."""

    def emit(self, record: logging.LogRecord) -> None:
        say(record.getMessage(), error=record.levelno >= logging.WARNING)


def install_console_logging() -> None:
    """edgeserve's own log records (INFO and up) go to the terminal, not the engine log."""
    logger = logging.getLogger("edgeserve")
    if not any(isinstance(h, ConsoleHandler) for h in logger.handlers):
        logger.addHandler(ConsoleHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def default_engine_log(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"edgeserve-serve-{port}-{os.getpid()}.log"


@contextlib.contextmanager
def engine_output_to(path: Path) -> Iterator[Path]:
    """Send everything written to fds 1 and 2 (by this process and its children) to ``path``
    for the duration; :func:`say` still reaches the terminal."""
    global _console
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    console = (os.fdopen(os.dup(saved_out), "w", buffering=1),
               os.fdopen(os.dup(saved_err), "w", buffering=1))
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        _console = console
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _console = None
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)
        for stream in console:
            stream.close()
