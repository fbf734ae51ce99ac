"""Local TCP ports for servers started by the benchmarks and the tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing is bound to now.

    The operating system picks it; the socket is closed again, so another process could take the
    port before the caller binds it (rare on a quiet host, and the caller's bind then fails loudly).
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
