"""What a policy reads of a device: the interface the simulated device and a live one both offer.

:class:`sim.core.device.Device` offers it inside a simulation, and ``edgeserve gateway``'s live
device offers it in front of real servers, so the same ``Policy.decide`` runs in both. It is a
:class:`typing.Protocol`: a device satisfies it by shape, and the compiled policies accept any
object that has these members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sim.core.job import Job


class Clock(Protocol):
    """The device's clock: ``now`` in seconds, on the clock of the job's deadline."""

    @property
    def now(self) -> float: ...


class DeviceView(Protocol):
    """The device state and the latency and energy predictions a policy decides from."""

    @property
    def cloud(self) -> object | None:
        """Something to offload to, or None when no cloud is reachable."""

    @property
    def queue_len(self) -> int: ...

    @property
    def running(self) -> int: ...

    @property
    def temp_c(self) -> float: ...

    @property
    def battery_fraction(self) -> float | None: ...

    @property
    def battery_low_fraction(self) -> float: ...

    @property
    def loop(self) -> Clock: ...

    def estimate_local_s(self, job: Job) -> float: ...

    def estimate_cloud_s(self, job: Job) -> float: ...

    def estimate_local_j(self, job: Job) -> float | None:
        """Energy ``job`` would cost on the device now, from its units' efficiency at their
        present clock levels (None where the profile gives no efficiency figures)."""

    def estimate_cloud_j(self, job: Job) -> float | None:
        """Radio energy of offloading ``job`` now (None without a cloud)."""
