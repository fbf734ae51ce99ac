"""The model: event loop, devices, engines, heat, links, cloud servers, workloads, policies, the run.

Imports :mod:`sim.scenario` only. Its event-path modules (:data:`sim.native.HOT`) may be loaded
from a compiled build (:mod:`sim.native`).
"""

from sim import native as _native

_native.follow(__path__, __name__)
