"""PrevActionsPrevRewardsEnvToModule: each running episode's previous actions and rewards in the forward batch.

The runner-side twin of the learner's ``PrevActionsPrevRewards`` (the seed's trajectory views
``shift=-1`` / ``shift=[-2,-1]`` on actions and rewards): ``prev_actions`` [N, n_prev_actions,
...] and ``prev_rewards`` [N, n_prev_rewards], oldest first, from the episode and its lookback,
``fill`` before the episode's start (``connectors.history``).

>>> piece = PrevActionsPrevRewardsEnvToModule(n_prev_actions=2, n_prev_rewards=1)
>>> piece.lookback_steps, piece.learner_piece().n_prev_actions
(2, 2)
"""

from __future__ import annotations

from typing import Any

from connectors.env_to_module.running_view import EnvToModulePiece
from connectors.learner.prev_actions_prev_rewards import PrevActionsPrevRewards
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_int

__all__ = ["PrevActionsPrevRewardsEnvToModule"]


class PrevActionsPrevRewardsEnvToModule(EnvToModulePiece):
    """``prev_actions`` and ``prev_rewards`` of each running episode (see the module docstring);
    ``learner_piece()`` builds the same columns for train batches."""

    def __init__(self, *, n_prev_actions: int = 1, n_prev_rewards: int = 1, fill: float = 0.0) -> None:
        self.n_prev_actions = check_int("n_prev_actions", n_prev_actions, minimum=0)
        self.n_prev_rewards = check_int("n_prev_rewards", n_prev_rewards, minimum=0)
        self.fill = fill
        self.lookback_steps = max(self.n_prev_actions, self.n_prev_rewards)

    def get_config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this piece (a saved policy's)."""
        return {"n_prev_actions": self.n_prev_actions, "n_prev_rewards": self.n_prev_rewards, "fill": self.fill}

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
        view = self.running(episodes, shared_data)
        if self.n_prev_actions:
            actions = view.get_actions(self.n_prev_actions, fill=self.fill)
            if isinstance(actions, (dict, tuple)):
                raise ConfigError("PrevActionsPrevRewardsEnvToModule needs array actions (not a Dict/Tuple space)")
            batch[Columns.PREV_ACTIONS] = actions
        if self.n_prev_rewards:
            batch[Columns.PREV_REWARDS] = view.get_rewards(self.n_prev_rewards, fill=self.fill)
        return batch

    def learner_piece(self) -> PrevActionsPrevRewards:
        return PrevActionsPrevRewards(
            n_prev_actions=self.n_prev_actions, n_prev_rewards=self.n_prev_rewards, fill=self.fill
        )

    def __repr__(self) -> str:
        return f"{self.name}(n_prev_actions={self.n_prev_actions}, n_prev_rewards={self.n_prev_rewards})"
