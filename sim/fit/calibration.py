"""What a calibration found: stage fits, the step model, the gap between steps, host effects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeserve.records import EngineStep
from sim.fit.coef_bootstrap import FitSamples
from sim.fit.least_squares import StageFit
from sim.scenario.fitted_range import FittedRange
from sim.scenario.profiles import free_cores
from sim.scenario.uncertainty import ProfileUncertainty


@dataclass(slots=True)
class Calibration:
    """The fits of :func:`sim.fit.calibrate.calibrate_traces`, before they become a profile."""

    fits: dict[str, StageFit] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage → why not fitted
    requests: int = 0
    workers: int = 0
    has_encode: bool = False  # some record has an encoder stage
    # the engine's step-time model from step records: a step's own time (vLLM's elapsed_ms);
    # the gap before a step is fitted apart (step_gap_*) and joins it in the profile
    step: StageFit | None = None
    steps: int = 0
    engine: dict[str, Any] = field(default_factory=dict)  # limits from the trace header
    host_cores: int = 0
    engine_threads: int = 0  # cores the engine's model worker may run on
    # the threads' worth of the cores a step takes from a worker beside it (fit_engine_demand;
    # None: not told by the trace, engine_threads stands)
    engine_demand: float | None = None
    engine_demand_n: int = 0
    contention: float = 0.0  # extra step seconds per second a worker was busy during it (κ)
    # the same for the worker-seconds beyond the cores the engine leaves free (κ₊; None: κ)
    contention_over: float | None = None
    contention_n: int = 0
    step_gap_s: float = 0.0  # idle time between back-to-back engine steps (before a decode step)
    step_gap_per: dict[str, float] = field(default_factory=dict)  # its growth per step feature
    handoff_s: float = 0.0  # median time from the end of preprocessing to the engine
    handoff_n: int = 0
    input_processing: StageFit | None = None  # vLLM's processing before a request is schedulable
    cold_factor: float = 0.0  # extra time of a step running a shape first (cold_shape_factor)
    cold_n: int = 0
    drift_sd: float = 0.0  # the machine's slow drift of step times (see fit_drift)
    drift_tau_s: float = 0.0
    drift_start: float = 0.0  # log slowdown of a fresh server's first steps
    admission: dict[str, int] = field(default_factory=dict)
    encode_in_worker: bool = False  # the runtime's encoder (--encoder onnx) ran in the workers
    # the sizes fitted on (image tokens, pixels, prompt tokens): where the models interpolate
    fitted_range: FittedRange = field(default_factory=FittedRange)
    # the rows each stage fit was made from (stage → samples), for the coefficients' bootstrap
    samples: dict[str, FitSamples] = field(default_factory=dict)
    # the coefficients' intervals and the spread of the traces' levels (sim.fit.identify)
    uncertainty: ProfileUncertainty | None = None
    # what the uncertainty changed: one line each ("contention 1.21 shrunk to 0.62: …")
    identification: list[str] = field(default_factory=list)

    def gap_s(self, s: EngineStep) -> float:
        """The modelled gap after step ``s`` (``step_gap_*``): with the step's own time, the
        period the simulated engine runs it for."""
        return self.step_gap_s + sum(g * float(getattr(s, k)) for k, g in self.step_gap_per.items())

    @property
    def free_cores(self) -> int:
        """The workers that run beside a step before they take cores from it: the host's cores
        the engine's threads leave free, at least one (the profile's ``host:`` computes the
        same, :attr:`sim.scenario.profiles.HostConfig.free_cores`)."""
        return free_cores(self.host_cores, self.engine_threads or self.host_cores)
