"""edgeserve's simulator: edge devices, networks, cloud LLM servers and offload policies.

A discrete-event model (on SimPy's event heap) of where each vision-language request should run
and what heat, batteries and links do to it. What a user needs is here::

    import sim

    class Nearest(sim.Policy):
        def decide(self, job, device):
            return sim.Decision(sim.Placement.LOCAL, "near")

    summary = sim.Simulation(sim.load_scenario(None), policy=Nearest()).run()

- :func:`load_scenario` — a scenario YAML (or the built-in default) as a typed :class:`Scenario`;
- :class:`Simulation` — run it whole (``run()`` → :class:`Summary`) or step by step
  (``run_until``, sinks, ``set_policy``, ``device_states``) as the terminal UI does;
- :class:`Policy`, :class:`Decision`, :class:`Placement`, :func:`register` — offload policies and
  how to write your own (:mod:`sim.core.policies`).

The package is four layers; a layer imports only the layers below it:

- ``sim.experiments`` — many runs: specifications, process pool / Ray, sweeps, comparisons, plots;
- ``sim.fit`` — profiles fitted from runtime traces, and their error on held-out traces;
- ``sim.core`` — the model: event loop, devices, engines, heat, links, cloud servers, workloads,
  policies, statistics and the run;
- ``sim.scenario`` — what is simulated: config schema, hardware profiles, deployments, scenarios.

:mod:`sim.native` (building and choosing the compiled event path) imports nothing of the
simulator. See docs/sim.md. Records use the runtime's schema (:mod:`edgeserve.records`); nothing
else of the runtime is imported.
"""

from sim import native as _native

# A compiled build of the event path (``make sim-native``) is used only when it was built from
# exactly these sources; otherwise pure Python (see sim/native.py). EDGESERVE_SIM_PURE=1 forces it.
# It must be chosen before any module of the event path is imported, hence the imports below.
_native.ACTIVE = _native.activate(__path__)

from sim.core.policies import Decision, Placement, Policy, register  # noqa: E402
from sim.core.report import Summary  # noqa: E402
from sim.core.simulation import Simulation  # noqa: E402
from sim.scenario.config import Scenario, load_scenario  # noqa: E402

__all__ = [
    "Decision",
    "Placement",
    "Policy",
    "Scenario",
    "Simulation",
    "Summary",
    "load_scenario",
    "register",
]
