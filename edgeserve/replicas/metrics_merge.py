"""One Prometheus page for all replicas: each replica's samples with a ``replica`` label.

Every replica is a whole ``edgeserve serve`` with its own ``/metrics``. Concatenating the pages
would repeat each family's ``# HELP``/``# TYPE`` lines and split its samples apart, which the
exposition format forbids; so the pages are parsed into families (a family's samples follow its
``# TYPE`` line, whatever their suffix: ``_total``, ``_bucket``, ``_sum`` …) and written back
once per family, every sample labelled with the replica it came from::

    edgeserve_requests_total{replica="0",outcome="ok"} 12.0
    edgeserve_requests_total{replica="1",outcome="ok"} 11.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class Family:
    header: list[str] = field(default_factory=list)  # its # HELP and # TYPE lines
    samples: list[str] = field(default_factory=list)


def labelled(sample: str, replica: int) -> str:
    """``sample`` with ``replica="i"`` as its first label."""
    name_end = min((i for i in (sample.find("{"), sample.find(" ")) if i >= 0), default=-1)
    if name_end < 0:
        return sample
    name, rest = sample[:name_end], sample[name_end:]
    if rest.startswith("{}"):
        rest = rest[2:]
    if rest.startswith("{"):
        return f'{name}{{replica="{replica}",{rest[1:]}'
    return f'{name}{{replica="{replica}"}}{rest}'


def merge_pages(pages: Sequence[str | None]) -> str:
    """The pages of replicas ``0 … n − 1`` as one page (``None``: a replica that did not answer)."""
    families: dict[str, Family] = {}
    for replica, page in enumerate(pages):
        if page is None:
            continue
        current = ""
        for line in page.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(maxsplit=3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = parts[2]
                    fam = families.setdefault(current, Family())
                    if parts[1] not in _kinds(fam.header):  # once per family
                        fam.header.append(line)
                continue
            families.setdefault(current, Family()).samples.append(labelled(line, replica))
    out: list[str] = []
    for fam in families.values():
        out += fam.header + fam.samples
    return "\n".join(out) + "\n"


def _kinds(header: list[str]) -> set[str]:
    return {line.split(maxsplit=2)[1] for line in header}
