"""How a model is deployed on a cloud server's GPUs: checkpoint size, tensor parallelism, prefix cache.

A :class:`~sim.scenario.profiles.CloudProfile` describes one GPU and one model. A *deployment* says how
that model is put on the box:

* **Quantized checkpoints.** Weight bytes follow from ``params × bytes per parameter`` of the
  model's ``weight_dtype`` (bf16 2, fp8/int8 1, int4 0.5). Real 4-bit checkpoints keep their
  embeddings, LM head and vision tower in 16 bits, so ``weights_gb`` overrides the product with
  the checkpoint's real size. The KV dtype is separate (``kv_dtype``: fp8 KV halves KV bytes).
* **Tensor parallelism** (``tp_size`` GPUs per replica, Megatron-style): every GPU holds
  ``1/tp`` of the weights and of the KV heads (a model with fewer KV heads than GPUs replicates
  them: ``ceil(kv_heads / tp)`` heads per GPU) and does ``1/tp`` of the FLOPs. The price is two
  all-reduces per layer per step (after attention and after the MLP) of the step's activations,
  ``tokens × hidden_size × 2`` bytes, over the box's :class:`Interconnect`. A ring all-reduce of
  ``n`` bytes over ``p`` GPUs with link bandwidth ``B`` and per-hop latency ``α`` takes::

      t_allreduce = 2(p − 1)·α + 2(p − 1)/p · n / B

  NVLink (hundreds of GB/s, microseconds) makes that small; PCIe (tens of GB/s, tens of µs,
  often through the host) does not, which is why replicas often beat TP on PCIe boxes.
* **Prefix caching** (``prefix_caching``): each replica keeps the KV of recent prompt prefixes
  (:mod:`sim.core.prefix_cache`); a request whose prefix is cached computes only the rest.

The default deployment (``Deployment()``) is one GPU, the dtype's weight bytes, no prefix cache:
what :mod:`sim.core.cloud` computed before deployments existed.

Box profiles (``models/profiles/boxes/*.yaml``) are cloud profiles with a ``deployment:`` section
(the box's GPU count and interconnect among it); :func:`load_box_profile` reads them.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sim.scenario.profiles import CloudProfile
from sim.scenario.schema import ConfigError, build, load_yaml, positive, require

BOX_DIR = Path(__file__).resolve().parents[2] / "models" / "profiles" / "boxes"
ACTIVATION_BYTES = 2.0  # bf16 activations cross the interconnect


class InterconnectKind(enum.StrEnum):
    NVLINK = "nvlink"  # GPU-to-GPU links (through NVSwitch on 8-GPU boards)
    PCIE = "pcie"  # PCIe, often through the CPU's root complex


@dataclass(slots=True, frozen=True)
class Interconnect:
    """GPU-to-GPU link of a box: bandwidth per GPU (one direction) and latency per hop."""

    kind: InterconnectKind
    bandwidth_gb_s: float
    latency_s: float

    def __post_init__(self) -> None:
        positive(self.bandwidth_gb_s, "bandwidth_gb_s")
        require(self.latency_s >= 0, "latency_s", "must be >= 0")

    def allreduce_s(self, nbytes: float, gpus: int) -> float:
        """Ring all-reduce of ``nbytes`` over ``gpus`` GPUs (0 for one GPU)."""
        if gpus <= 1:
            return 0.0
        p = gpus
        return 2 * (p - 1) * self.latency_s + 2 * (p - 1) / p * nbytes / (self.bandwidth_gb_s * 1e9)


@dataclass(slots=True, frozen=True)
class Deployment:
    """Checkpoint size, TP degree and prefix caching of the replicas of one cloud server."""

    tp_size: int = 1
    interconnect: Interconnect | None = None  # needed when tp_size > 1
    hidden_size: int = 0  # the model's hidden size: the all-reduce message per token (TP only)
    weights_gb: float | None = None  # the checkpoint's real size (None: params × dtype bytes)
    prefix_caching: bool = False
    gpus: int = 0  # GPUs in the box (0: not said); replicas × tp_size must fit in it

    def __post_init__(self) -> None:
        positive(self.tp_size, "tp_size")
        if self.tp_size > 1:
            require(self.interconnect is not None, "interconnect",
                    f"tp_size {self.tp_size} needs an interconnect (nvlink or pcie, bandwidth, "
                    "latency)")
            require(self.hidden_size > 0, "hidden_size",
                    "tp_size > 1 needs the model's hidden size (the all-reduce message)")
        if self.weights_gb is not None:
            positive(self.weights_gb, "weights_gb")
        require(self.gpus >= 0, "gpus", "must be >= 0")

    def allreduce_step_s(self, tokens: int, layers: int) -> float:
        """All-reduce time of one step carrying ``tokens`` tokens: two per layer."""
        if self.tp_size <= 1 or self.interconnect is None:
            return 0.0
        nbytes = tokens * self.hidden_size * ACTIVATION_BYTES
        return 2 * layers * self.interconnect.allreduce_s(nbytes, self.tp_size)

    def kv_heads_per_gpu(self, kv_heads: int) -> int:
        return math.ceil(kv_heads / self.tp_size)

    def with_tp(self, tp_size: int) -> Deployment:
        return replace(self, tp_size=tp_size)


SINGLE_GPU = Deployment()


@dataclass(slots=True, frozen=True)
class BoxProfile:
    """A cloud profile (one GPU, one model) and how the box deploys it."""

    profile: CloudProfile
    deployment: Deployment = field(default_factory=Deployment)

    @property
    def name(self) -> str:
        return self.profile.name


def box_from_raw(data: Any, where: str) -> BoxProfile:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a box profile is a mapping")
    raw = dict(data)
    dep = raw.pop("deployment", {}) or {}
    return BoxProfile(build(CloudProfile, raw, where), build(Deployment, dep, f"{where}.deployment"))


def load_box_profile(ref: str | Path) -> BoxProfile:
    """A box profile by name (``models/profiles/boxes/<name>.yaml``) or path."""
    p = Path(ref)
    if not str(ref).endswith((".yaml", ".yml")):
        p = BOX_DIR / f"{ref}.yaml"
    if not p.is_file():
        known = ", ".join(sorted(x.stem for x in BOX_DIR.glob("*.yaml")))
        raise ConfigError(f"no box profile {ref!r} (known: {known})")
    return box_from_raw(load_yaml(p), f"profile {p.stem}")
