"""Trained policies outside the training run: load one with no Ray, ask it for actions, save it.

``Policy`` (one module and the runner's pipelines), ``MultiAgentPolicy`` (one per module and the
agent mapping), and ``load_policy`` (whichever of the two a folder, checkpoint or run directory holds).
"""

from ray_sampler.policy.multi_agent_policy import MultiAgentPolicy, load_policy, runner_state
from ray_sampler.policy.policy import FORMAT, POLICY_FILE, Policy, PolicyError, PolicyState

__all__ = [
    "FORMAT",
    "POLICY_FILE",
    "MultiAgentPolicy",
    "Policy",
    "PolicyError",
    "PolicyState",
    "load_policy",
    "runner_state",
]
