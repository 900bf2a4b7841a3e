"""V-trace (IMPALA, Espeholt et al. 2018): off-policy value targets and policy-gradient advantages.

For steps sampled by a behaviour policy mu and learned by a target policy pi, with the importance
ratio ``pi(a_t|x_t) / mu(a_t|x_t)`` clipped twice, ``rho_t = min(rho_bar, ratio_t)`` and
``c_t = min(c_bar, ratio_t)``, the paper's n-step target (its eq. 1) is

    v_s = V(x_s) + sum_{t=s}^{end} gamma^(t-s) (prod_{i=s}^{t-1} c_i) rho_t delta_t,
    delta_t = r_t + gamma V(x_{t+1}) - V(x_t),

computed backwards as ``v_s - V(x_s) = rho_s delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))``; the
policy gradient's advantage is ``rho_s (r_s + gamma v_{s+1} - V(x_s))``. Within each chunk of a
ColumnarEpisodes layout, as GAE's: ``next_values`` holds ``V(x_{t+1})``, 0 after a terminal and the
bootstrap value after the chunk's last step when it was cut or truncated, and ``v_{end+1}`` is that
value itself, so a truncated chunk bootstraps and a terminated one does not. On-policy (every ratio
1, ``rho_bar`` and ``c_bar`` at least 1) ``v_s`` is the discounted return to the chunk's end plus the
discounted bootstrap: the n-step return. ``rho_bar`` bounds what the targets converge to (the value
of a policy between mu and pi), ``c_bar`` how far back a correction travels; the paper requires
``rho_bar >= c_bar``.

``VTraceAdvantages`` is the learner piece: GAE's place in a pipeline, with the behaviour policy's
log-probabilities the runners stored (``action_logp``) and the learner's module as the target.

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[1.0, 1.0], terminated=True)
>>> vs, adv = vtrace(rewards=np.ones(2), values=np.zeros(2), next_values=np.zeros(2), log_rhos=np.zeros(2),
...                  col=episodes_to_columnar([ep]), gamma=0.5)
>>> vs.tolist(), adv.tolist()
([1.5, 1.0], [1.5, 1.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.learner.general_advantage_estimation import gae, step_values
from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of, step_index
from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.distributions import dist_class_for
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.validate import check_bool, check_number, check_probability

__all__ = ["LOG_RHOS", "VTraceAdvantages", "vtrace"]

LOG_RHOS = "log_rhos"
"""The batch column ``VTraceAdvantages`` adds: log pi(a|x) - log mu(a|x) of every step, unclipped."""


class VTraceAdvantages(LearnerPiece):
    """``advantages`` (V-trace's policy-gradient advantages), ``value_targets`` (``v_s``), ``vf_preds``
    and ``log_rhos`` for every step, after the columns (``obs``, ``actions``, ``action_logp``) are in
    the batch: the target log-probabilities come from ``rl_module.forward_inference`` on the batch's
    observations (as the loss sees them), the values as GAE's do (``step_values``: bootstrapped at a
    cut or a time limit). ``standardize_advantages`` as GAE's, off by default (IMPALA and APPO use
    the advantages as they come). Stateless modules only, for now."""

    def __init__(
        self,
        *,
        gamma: float = 0.99,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        standardize_advantages: bool = False,
        module_id: str = DEFAULT_MODULE_ID,
    ) -> None:
        super().__init__(module_id=module_id)
        self.gamma = check_probability("gamma", gamma)
        self.rho_bar = check_number("rho_bar", rho_bar, minimum=0.0, exclusive_minimum=True)
        self.c_bar = check_number("c_bar", c_bar, minimum=0.0, exclusive_minimum=True)
        self.standardize = check_bool("standardize_advantages", standardize_advantages)

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        if is_stateful(rl_module):
            raise ConfigError(f"V-trace takes stateless modules for now (got the stateful {type(rl_module).__name__})")
        col = columnar_of(episodes, shared_data)
        out = self.module_batch(batch)
        missing = [k for k in (Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP) if k not in out]
        if missing:
            raise ConfigError(
                f"VTraceAdvantages needs {missing} in the batch: run AddColumnsFromEpisodesToTrainBatch first"
            )
        values, next_values = step_values(rl_module, col, shared_data, max_seq_len=1)
        dist_inputs = rl_module.forward_inference({Columns.OBS: out[Columns.OBS]})[Columns.ACTION_DIST_INPUTS]
        dist = dist_class_for(rl_module.action_space)(np.asarray(dist_inputs, np.float64))
        target = dist.logp(out[Columns.ACTIONS])
        log_rhos = target - np.asarray(out[Columns.ACTION_LOGP], np.float64)
        vs, advantages = vtrace(
            rewards=col.data.rewards, values=values, next_values=next_values, log_rhos=log_rhos, col=col,
            gamma=self.gamma, rho_bar=self.rho_bar, c_bar=self.c_bar,
        )  # fmt: skip
        out[Columns.VF_PREDS], out[Columns.VALUE_TARGETS], out[LOG_RHOS] = values, vs, log_rhos
        if self.standardize and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / max(advantages.std(), 1e-8)
        out[Columns.ADVANTAGES] = advantages
        return batch


def vtrace(
    *,
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    log_rhos: np.ndarray,
    col: ColumnarEpisodes,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(value targets ``v_s``, policy-gradient advantages) for every step of ``col``'s chunks (see the
    module docstring); every array has one entry per step, ``log_rhos`` is ``log pi - log mu``."""
    gamma = check_probability("gamma", gamma)
    rho_bar = check_number("rho_bar", rho_bar, minimum=0.0, exclusive_minimum=True)
    c_bar = check_number("c_bar", c_bar, minimum=0.0, exclusive_minimum=True)
    ratios = np.exp(np.asarray(log_rhos, np.float64))
    rhos, cs = np.minimum(rho_bar, ratios), np.minimum(c_bar, ratios)
    rewards, values = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    next_values = np.asarray(next_values, np.float64)
    corrections = gae(rhos * (rewards + gamma * next_values - values), col, gamma * cs)  # v_s - V(x_s)
    vs = values + corrections
    # v_{s+1}: the next step's target within the chunk; after its last step, the bootstrap (or 0).
    chunk, k = step_index(col)
    last = k == col.lens[chunk] - 1
    vs_next = np.where(last, next_values, np.roll(vs, -1))
    return vs, rhos * (rewards + gamma * vs_next - values)
