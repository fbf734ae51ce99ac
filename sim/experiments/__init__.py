"""Many runs: picklable specifications, process pool and Ray, sweeps, comparisons and plots.

The top layer of the simulator: imports :mod:`sim.fit`, :mod:`sim.core` and :mod:`sim.scenario`.
"""
