"""What a user writes against ``import sim`` alone: a policy of their own, a scenario, a run."""

from __future__ import annotations

from dataclasses import dataclass

import sim


@dataclass(slots=True)
class EveryOtherToCloud(sim.Policy):
    """Alternates: the first request local, the second to the cloud, and so on."""

    name = "every_other_to_cloud"
    sent: int = 0

    def decide(self, job, device) -> sim.Decision:
        self.sent += 1
        where = sim.Placement.CLOUD if self.sent % 2 == 0 else sim.Placement.LOCAL
        return sim.Decision(where, "alternating")


def test_a_policy_of_ones_own_runs_through_the_top_level_api():
    scenario = sim.load_scenario(None, [("requests", 400), ("duration_s", None),
                                        ("devices[0].count", 1)])
    assert isinstance(scenario, sim.Scenario)
    policy = EveryOtherToCloud()
    summary = sim.Simulation(scenario, policy=policy, seed=3).run()
    assert isinstance(summary, sim.Summary)
    assert summary.policy == "every_other_to_cloud"
    assert policy.sent == summary.fleet.requests == 400
    # half the decisions were offloads: the fleet's offload share is exactly one half
    assert summary.fleet.offload_share == 0.5


def test_register_makes_a_policy_known_by_name():
    @sim.register
    @dataclass(slots=True)
    class LocalAlways(sim.Policy):
        name = "local_always_public_api"

        def decide(self, job, device) -> sim.Decision:
            return sim.Decision(sim.Placement.LOCAL, "local")

    scenario = sim.load_scenario(None, [("requests", 50), ("duration_s", None)])
    summary = sim.Simulation(scenario, policy="local_always_public_api", seed=1).run()
    assert summary.policy == "local_always_public_api"
    assert summary.fleet.offload_share == 0.0
