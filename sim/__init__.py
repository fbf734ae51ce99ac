"""edgeserve's simulator: edge devices, networks, cloud LLM servers and offload policies.

A discrete-event model (on SimPy's event heap) of where each vision-language request should run
and what heat, batteries and links do to it. Entry points:

- :func:`sim.config.load_scenario` — a scenario YAML (or the built-in default) as typed config;
- :class:`sim.simulation.Simulation` — run it whole (``run()``) or step by step
  (``run_until``, sinks, ``set_policy``, ``device_states``) as the terminal UI does;
- :mod:`sim.policies` — the offload policies and how to write your own;
- :mod:`sim.calibrate` — fit device profiles from runtime traces.

See docs/sim.md. Records use the runtime's schema (:mod:`edgeserve.records`); nothing else of the
runtime is imported.
"""

from sim import native as _native

# A compiled build of the event path (``make sim-native``) is used only when it was built from
# exactly these sources; otherwise pure Python (see sim/native.py). EDGESERVE_SIM_PURE=1 forces it.
_native.ACTIVE = _native.activate(__path__)
