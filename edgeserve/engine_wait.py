"""How vLLM's processes wait for each other between steps: ``sched_yield`` spins or short sleeps.

vLLM's EngineCore and its model worker hand every step to each other through shared-memory
queues (``shm_broadcast.py``). A reader with nothing to read does not sleep for a second after
its last read: it calls ``sched_yield`` in a loop (``SpinCondition.wait``), and a writer waiting
for a free slot does the same. Linux's EEVDF scheduler makes a yielding task forfeit the rest of
its time slice (``sched/fair: Forfeit vruntime on yield``, in 6.12.63, 6.15 and later): each
yield moves the task's virtual runtime to its deadline. Where the yielder is the only eligible
task on its core, it is picked again at once and yields again, so a second of spinning can push
its virtual runtime seconds ahead of the core's other tasks. A reader that then gets its message
*while still spinning* (it has not slept, so nothing clamps that lag) is runnable but not
eligible: the core runs the others until they catch up.

vLLM's CPU build binds the model worker to its OMP cores (core 0 on a 2-core host, and
:mod:`edgeserve.placement` moves the EngineCore there too). Two servers on one 2-core host put
both workers and both EngineCores on core 0: measured 2026-12-07 on a 2-core Zen 3 EPYC
(kernel 6.18), one server's steps stopped for 5-25 s at a time, runnable and using no CPU, and
the other's in turn; with the sleeps below no step took over 1 s (``benchmarks/engine_wait.py``;
docs/runtime.md "How the engine's processes wait").

On vLLM's CPU build edgeserve replaces the spin's ``sched_yield`` with a sleep of
:data:`NAP_S`: a sleeping task leaves the run queue, and on waking its lag is clamped, so no
spin can starve it, at the cost of up to a few tens of microseconds per message. The server sets
:data:`ENV` before its engine starts; :func:`register`, a vLLM *general plugin* (entry point
``vllm.general_plugins`` in pyproject.toml, which vLLM loads in its EngineCore and worker
processes), reads it and patches vLLM's spin there. Any other vLLM in the same environment
(``vllm serve``) is left as it is: without the variable the plugin does nothing. On a GPU host
the spin stays: the cores are many and the step loop's latency counts.
"""

from __future__ import annotations

import enum
import os
import time

ENV = "EDGESERVE_ENGINE_WAIT"  # set by `edgeserve serve`; read in vLLM's processes
NAP_S = 50e-6  # one sleep of the spin: the kernel's default timer slack is 50 µs


class EngineWait(enum.StrEnum):
    """How vLLM's engine processes wait on each other's shared-memory queues."""

    YIELD = "yield"  # vLLM's own spin: sched_yield in a loop for a second after each read
    SLEEP = "sleep"  # the same loop, sleeping NAP_S instead of yielding


def nap() -> None:
    """One turn of the spin: sleep :data:`NAP_S` (leave the run queue) instead of yielding."""
    time.sleep(NAP_S)


def patch_vllm() -> bool:
    """Make vLLM's shared-memory queues in this process sleep instead of yield; False when this
    vLLM has no such spin (another version: nothing is patched)."""
    try:
        from vllm.distributed import utils
        from vllm.distributed.device_communicators import shm_broadcast
    except ImportError:
        return False
    if not callable(getattr(utils, "sched_yield", None)) or not callable(
            getattr(shm_broadcast, "sched_yield", None)):
        return False
    utils.sched_yield = nap
    shm_broadcast.sched_yield = nap  # imported by name there: patched where it is looked up
    return True


PLUGIN = "edgeserve_engine_wait"  # its entry-point name


def plugin_installed() -> bool:
    """Whether vLLM's plugin loader will find :func:`register` (the installed metadata names it;
    an install that predates it needs ``make`` or ``pip install -e .`` again)."""
    from importlib.metadata import entry_points

    return any(ep.name == PLUGIN and ep.value == f"{__name__}:register"
               for ep in entry_points(group="vllm.general_plugins"))


def register() -> None:
    """vLLM's general-plugin hook, called in each of vLLM's processes: patch the spin when the
    server that started them asked for it (:data:`ENV` = ``sleep``)."""
    if os.environ.get(ENV) == EngineWait.SLEEP.value:
        patch_vllm()
