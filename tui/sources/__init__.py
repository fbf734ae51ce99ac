"""Where the UI's data comes from: one :class:`~tui.sources.base.Source` protocol, three sources."""
