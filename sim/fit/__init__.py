"""Device and server profiles fitted from runtime traces, and their error on held-out traces.

Imports :mod:`sim.core` and :mod:`sim.scenario`.
"""
