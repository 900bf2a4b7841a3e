"""SubEnvVector: the runner's own sync vector env, in which one sub-env can fail without the others.

It is gymnasium's ``SyncVectorEnv`` in ``SAME_STEP`` autoreset mode, with the same outputs byte
for byte (its step and reset loops, with each sub-env's call in its own ``try``). Why our own:
gymnasium's loop stops at the first sub-env that raises, leaving the sub-envs before it stepped
and those after it not, so neither a retry nor going on is a step that happened. Here every
sub-env makes its step whatever another one does:

- ``make_env`` given (``restart_failed_sub_environments=True``): a sub-env that raises in
  ``step()`` or ``reset()`` is closed, rebuilt with ``make_env(vector_index)`` and reset with
  ``reset_seed(vector_index, restart)`` (a fresh seed stream). A failed ``step()`` makes no
  transition: its row holds the new env's reset observation, reward 0, no flags, the reset's
  info, and its index is in ``failed`` until the next step. A failed autoreset after an
  episode's end only replaces the reset (the episode ended normally). A rebuilt env that raises
  again in its first ``reset()`` raises ``EnvError``.
- ``make_env`` None: the first sub-env that raises makes the vector env raise ``EnvError`` naming
  ``worker_index``, ``vector_index`` and the cause; it is then half-stepped and must be rebuilt.

A ``try`` costs nothing in the no-fault path (Python 3.11 zero-cost exceptions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, iterate

from ray_sampler.errors import EnvError

__all__ = ["SubEnvVector"]


class SubEnvVector(gym.vector.SyncVectorEnv):
    """SyncVectorEnv (SAME_STEP) whose sub-envs fail and restart alone (see the module docstring)."""

    def __init__(
        self,
        envs: list[gym.Env],
        *,
        worker_index: int,
        make_env: Callable[[int], gym.Env] | None = None,
        reset_seed: Callable[[int, int], int | None] | None = None,
    ) -> None:
        super().__init__([_returning(e) for e in envs], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.worker_index = worker_index
        self._make_env = make_env
        self._reset_seed = reset_seed
        self._restarts_of = [0] * len(envs)
        self.failed: list[int] = []
        """Sub-envs whose ``step()`` raised in the last step (rebuilt; no transition)."""
        self.num_restarts = 0
        """Sub-envs rebuilt so far."""
        self.num_stepped_before_error = 0
        """Sub-envs that had made their transition in the step that raised ``EnvError`` (restarts off)."""

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self.failed = []
        infos: dict[str, Any] = {}
        for i, action in enumerate(iterate(self.action_space, actions)):
            try:
                obs, reward, terminated, truncated, env_info = self.envs[i].step(action)
            except Exception as e:  # the sub-env's own failure: restart it alone (or raise EnvError)
                self.num_stepped_before_error = i - len(self.failed)
                env_info = self._restart(i, "step", e)
                self.failed.append(i)
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i] = (
                    obs,
                    reward,
                    terminated,
                    truncated,
                )
                if terminated or truncated:
                    infos = self._add_info(infos, {"final_obs": obs, "final_info": env_info}, i)
                    try:
                        self._env_obs[i], env_info = self.envs[i].reset()
                    except Exception as e:  # the episode ended normally; only its autoreset failed
                        self.num_stepped_before_error = i + 1 - len(self.failed)
                        env_info = self._restart(i, "reset", e)
            infos = self._add_info(infos, env_info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if options is not None and "reset_mask" in options:
            return super().reset(seed=seed, options=options)  # the runner never masks: SAME_STEP resets itself
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        self._terminations = np.zeros((self.num_envs,), dtype=np.bool_)
        self._truncations = np.zeros((self.num_envs,), dtype=np.bool_)
        self._autoreset_envs = np.zeros((self.num_envs,), dtype=np.bool_)
        self.failed = []
        infos: dict[str, Any] = {}
        for i, (env, single_seed) in enumerate(zip(self.envs, seeds, strict=True)):
            try:
                self._env_obs[i], env_info = env.reset(seed=single_seed, options=options)
            except Exception as e:
                env_info = self._restart(i, "reset", e)
            infos = self._add_info(infos, env_info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations, infos

    def _restart(self, i: int, phase: str, cause: Exception) -> dict:
        """Rebuilds sub-env ``i`` after ``cause`` and resets it: its reset info (raises EnvError when
        restarts are off or the new env fails too)."""
        where = f"worker_index={self.worker_index}, vector_index={i}"
        if self._make_env is None:
            raise EnvError(f"sub-env {where} raised in {phase}(): {cause!r}") from cause
        with contextlib.suppress(Exception):  # a broken env may fail to close; it is replaced either way
            self.envs[i].close()
        self._restarts_of[i] += 1
        self.num_restarts += 1
        self.envs[i] = self._make_env(i)
        seed = self._reset_seed(i, self._restarts_of[i]) if self._reset_seed is not None else None
        try:
            self._env_obs[i], env_info = self.envs[i].reset(seed=seed)
        except Exception as e:
            raise EnvError(f"sub-env {where} raised in reset() right after a restart: {e!r}") from e
        return env_info


def _returning(env: gym.Env) -> Callable[[], gym.Env]:
    """A thunk giving back an env already made (SyncVectorEnv takes env factories)."""
    return lambda: env
