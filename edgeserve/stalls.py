"""Stall accounting: how long the engine sat idle while admitted work waited on the CPU.

Two timelines meet here. The frontend knows exactly when each admitted request enters and leaves
a CPU stage (waiting for a worker, or inside one). vLLM's stat-logger interface reports every
engine step with its duration (``SchedulerStats.iteration_details.elapsed_ms``), shortly after the
step ends. A *stall* is time on the first timeline — at least one request in a CPU stage — that
is not covered by the second — the engine not stepping::

    CPU stage occupied   ──████████████──────████──
    engine stepping      ████──────██████████──────
    stall                ──  ██████          ████──

A step's report arrives after the step, so the step is placed as ``[received − elapsed,
received]``; when the frontend's event loop was blocked (inline mode) reports arrive in bunches,
and each step is then placed right after the previous one so that total busy time is preserved.
The meter settles a window only ``lag_s`` seconds after its end, so late reports still count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SPAN_MERGE_GAP_S = 0.002  # steps closer than this are one span in traces (keeps samples small)


@dataclass(slots=True)
class WindowStats:
    """One settled window: its length, engine stepping time and stall time (seconds)."""

    start_s: float
    end_s: float
    busy_s: float
    stall_s: float
    busy_spans: list[tuple[float, float]] = field(default_factory=list)  # steps, nearby merged
    stall_spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def busy_fraction(self) -> float:
        span = self.end_s - self.start_s
        return self.busy_s / span if span > 0 else 0.0


def _measure(intervals: list[tuple[float, float]]) -> float:
    """Total length of a union of intervals."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None and cur_a is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_a is not None and cur_b is not None:
        total += cur_b - cur_a
    return total


def _union(intervals: list[tuple[float, float]], gap_s: float = 0.0) -> list[tuple[float, float]]:
    """Sorted disjoint union; intervals closer than ``gap_s`` are joined."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + gap_s:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(union of xs) minus (union of ys); both sorted and disjoint."""
    out: list[tuple[float, float]] = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


class StallMeter:
    """Collects CPU-stage occupancy and engine steps; settles windows into busy and stall time."""

    def __init__(self, start_s: float, lag_s: float = 0.5) -> None:
        self.lag_s = lag_s
        self._cursor = start_s
        self._cpu_count_at_cursor = 0
        self._cpu_events: list[tuple[float, int]] = []  # (t, +1 | -1), in time order
        self._cpu_count = 0
        self._steps: list[tuple[float, float]] = []
        self._last_step_end = start_s
        self.busy_total_s = 0.0
        self.stall_total_s = 0.0
        self.steps_total = 0

    # ---- inputs ------------------------------------------------------------------------
    def cpu_enter(self, t: float) -> None:
        self._cpu_events.append((t, +1))
        self._cpu_count += 1

    def cpu_exit(self, t: float) -> None:
        self._cpu_events.append((t, -1))
        self._cpu_count -= 1

    @property
    def in_cpu_stage(self) -> int:
        """Admitted requests in a CPU stage right now."""
        return self._cpu_count

    def engine_step(self, received_s: float, elapsed_s: float) -> None:
        start = max(received_s - elapsed_s, self._last_step_end)
        end = start + elapsed_s
        self._steps.append((start, end))
        self._last_step_end = end
        self.steps_total += 1

    # ---- settling ----------------------------------------------------------------------
    def settle(self, now: float) -> WindowStats:
        """Settle ``[previous end, now − lag_s]`` and return its busy and stall seconds."""
        a, b = self._cursor, max(self._cursor, now - self.lag_s)
        occupied: list[tuple[float, float]] = []
        count, since = self._cpu_count_at_cursor, a
        keep_events: list[tuple[float, int]] = []
        for t, d in self._cpu_events:
            if t >= b:
                keep_events.append((t, d))
                continue
            t = max(t, a)
            if count > 0 and t > since:
                occupied.append((since, t))
            count += d
            since = t
        if count > 0 and b > since:
            occupied.append((since, b))
        busy = _union([(max(s, a), min(e, b)) for s, e in self._steps if e > a and s < b])
        busy_s = _measure(busy)
        stall_spans = _subtract(occupied, busy)
        stall_s = _measure(stall_spans)
        self._cpu_events = keep_events
        self._cpu_count_at_cursor = count
        self._steps = [(max(s, b), e) for s, e in self._steps if e > b]
        self._cursor = b
        self.busy_total_s += busy_s
        self.stall_total_s += stall_s
        return WindowStats(a, b, busy_s, stall_s, _union(busy, SPAN_MERGE_GAP_S), stall_spans)
