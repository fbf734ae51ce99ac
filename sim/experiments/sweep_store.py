"""The partial results of a sweep on disk, so that an interrupted sweep resumes where it stopped.

A sweep writes each run the moment it finishes as one JSON line of ``sweep-runs.jsonl`` in its
output folder: the run's *key*, its label (the grid coordinates), its summary and its latency
CDF. Started again with the same output folder, the sweep reads the file back and runs only the
points whose key is missing. A key is a SHA-256 over everything that decides a run's result —
the scenario mapping with profiles inlined, the overrides, the policy, the seed — and over the
simulator's sources (``sim/**/*.py`` and the record schema), so a line is reused only by the very
same run of the very same simulator; lines of an edited scenario or simulator are ignored.

Floats go through JSON with Python's shortest round-trip repr (NaN and infinities included), so a
summary read back equals the summary written, field for field.

A process killed in the middle of a write leaves at most one partial last line; it is dropped
when the file is opened again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

from sim.core.report import CloudSummary, DeviceSummary, Summary
from sim.experiments.runner import RunResult, RunSpec

FILE_NAME = "sweep-runs.jsonl"
FORMAT = 1  # bump when the line layout changes


def run_key(spec: RunSpec, sources: str) -> str:
    """What decides a run's result, hashed (see the module docstring)."""
    what = {"format": FORMAT, "sources": sources, "raw": spec.raw, "policy": spec.policy,
            "seed": spec.seed, "overrides": [list(o) for o in spec.overrides]}
    text = json.dumps(what, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def summary_from_dict(d: dict[str, Any]) -> Summary:
    """The inverse of :meth:`Summary.to_dict`."""
    names = {f.name for f in fields(Summary)}
    rows = {"devices", "fleet", "classes", "clouds"}
    kw = {k: v for k, v in d.items() if k in names and k not in rows}
    kw["devices"] = [DeviceSummary(**r) for r in d["devices"]]
    kw["fleet"] = DeviceSummary(**d["fleet"])
    if "classes" in names:
        kw["classes"] = [DeviceSummary(**r) for r in d.get("classes", [])]
    kw["clouds"] = [CloudSummary(**r) for r in d.get("clouds", [])]
    return Summary(**kw)


def _line(key: str, result: RunResult) -> str:
    xs, ys = result.cdf
    return json.dumps({"key": key, "label": result.spec_label, "wall_s": result.wall_s,
                       "summary": result.summary.to_dict(), "cdf": [list(xs), list(ys)]},
                      default=str) + "\n"


class RunStore:
    """``sweep-runs.jsonl`` in a folder: finished runs by key, appended as they come."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / FILE_NAME
        self.runs: dict[str, RunResult] = {}
        self.ignored = 0  # lines of other scenarios or simulator sources, or unreadable
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a write was cut short: drop the partial last line
            with open(self.path, "r+b") as f:
                f.truncate(end)
        for raw in data[:end].splitlines():
            try:
                d = json.loads(raw)
                xs, ys = d["cdf"]
                self.runs[d["key"]] = RunResult(d["label"], summary_from_dict(d["summary"]),
                                                (xs, ys), {}, d["wall_s"])
            except (ValueError, KeyError, TypeError):
                self.ignored += 1

    def done(self, keys: Iterable[str]) -> int:
        """How many of ``keys`` have a stored run."""
        return sum(k in self.runs for k in keys)

    def add(self, key: str, result: RunResult) -> None:
        """Append one finished run (flushed to the OS before returning)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(_line(key, result))
            f.flush()
            os.fsync(f.fileno())
        self.runs[key] = result
