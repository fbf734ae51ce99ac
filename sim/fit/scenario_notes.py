"""A scenario's image sizes that lie outside the sizes its devices' profiles were fitted on.

``edgeserve sim run`` prints these notes on stderr: there a calibrated profile extrapolates
(:mod:`sim.scenario.fitted_range`).
"""

from __future__ import annotations

from edgeserve.records import RequestRecord
from sim.core.workload import ImageGeometry
from sim.scenario.config import Scenario, WorkloadKind
from sim.scenario.fitted_range import span


def scenario_notes(scenario: Scenario) -> list[str]:
    """For each device whose profile has a ``fitted_range``, the image sizes of its synthetic
    workload that lie outside it (a replayed trace is checked by ``calibrate validate``). Prompt
    tokens are not checked here: a synthetic prompt's text length is the scenario's choice, not
    a recorded chat template's, and the prefill's per-token term is linear."""
    notes = []
    for d in scenario.devices:
        fr, w = d.profile.fitted_range, d.workload
        if fr is None or w.kind is WorkloadKind.REPLAY:
            continue
        geometry = ImageGeometry(w.image)
        recs = []
        for i, size in enumerate(w.image.sizes):
            th, tw, tokens, decoded = geometry.target(size.width, size.height)
            recs.append(RequestRecord(id=str(i), arrived_s=0.0, num_images=1, image_tokens=tokens,
                                      source_width=size.width, source_height=size.height,
                                      decoded_pixels=decoded, target_width=tw, target_height=th))
        for x in fr.outside(recs):
            notes.append(f"device {d.name}: {x.feature} {span(*x.values)} outside the "
                         f"{span(*x.fitted)} its profile {d.profile.name!r} was fitted on "
                         f"({x.requests} of the workload's {x.of_requests} image sizes): the "
                         "profile extrapolates there")
    return notes
