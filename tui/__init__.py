"""The terminal UI (``edgeserve tui``): watch a live server, a simulation or a recorded trace.

A source (:mod:`tui.sources`) delivers the shared records of :mod:`edgeserve.records`; a pure
aggregator (:mod:`tui.state`) folds them into what the panels (:mod:`tui.widgets`) draw; the app
(:mod:`tui.app`) polls the source once per refresh. The UI renders records; it owns no model logic.
"""
