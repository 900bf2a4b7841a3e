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

What a sub-env returns is checked, and an env that breaks the contract raises ``EnvError`` naming
the sub-env and what was expected (the sub-env is not rebuilt, as one that raised is: a rebuilt
one would break it again; its step is dropped and counted):
``reset()`` must return ``(observation, info)`` and ``step()`` five values (the old gym API
returned the observation alone, and four values); for the first ``check_steps`` calls of each
sub-env (its resets included; a rebuilt sub-env starts again), every observation must lie in
``single_observation_space`` (``space.contains``; ``describe_outside`` says where it does not).
A batch that cannot be made of the observations (a row of another shape) names its sub-env too.

Speed (the runner steps through here every step): ``step_rows`` is ``step`` with the infos by
sub-env, which the runner's ``VectorStepper`` reads as they are, instead of gymnasium's vector
infos packed per key (masks and arrays) and split back per sub-env; a Box observation batch is
one ``np.array`` of the rows; actions of a Box, MultiDiscrete or MultiBinary batch space are
iterated as array rows. ``bench/sampling_bench.py`` measures the runner against the bare loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, iterate

from ray_sampler.data.spaces import describe_outside
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
        check_steps: int = 0,
    ) -> None:
        super().__init__([_returning(e) for e in envs], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.worker_index = worker_index
        self._check_steps = check_steps
        self._checks_left = [check_steps] * len(envs)
        """Per sub-env: its calls still to check against the observation space."""
        self._num_checking = len(envs) if check_steps > 0 else 0
        """Sub-envs with calls still to check (none: the step loop stops looking)."""
        self._checking = self._num_checking > 0
        self._make_env = make_env
        self._reset_seed = reset_seed
        self._restarts_of = [0] * len(envs)
        self.failed: list[int] = []
        """Sub-envs whose ``step()`` raised in the last step (rebuilt; no transition)."""
        self.num_restarts = 0
        """Sub-envs rebuilt so far."""
        self.num_stepped_before_error = 0
        """Sub-envs that had made their transition in the step that raised ``EnvError`` (restarts off)."""
        space = self.single_observation_space
        # Fast path of the per-step loop (the same values as gymnasium's): array actions of a
        # Box/MultiDiscrete/MultiBinary batch space iterate as rows (``iterate`` does just that),
        # and a Box observation batch is one ``np.array`` of the rows, a new array each step.
        self._row_actions = isinstance(
            self.action_space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
        )
        self._obs_batch: tuple[np.dtype, tuple[int, ...]] | None = (
            (space.dtype, (len(envs), *space.shape)) if type(space) is gym.spaces.Box else None
        )

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, rows, finals = self.step_rows(actions)
        infos: dict[str, Any] = {}
        for i in sorted(rows.keys() | finals.keys()):  # gymnasium's order: the end's, then the reset's
            if i in finals:
                infos = self._add_info(infos, {"final_obs": finals[i][0], "final_info": finals[i][1]}, i)
            if i in rows:
                infos = self._add_info(infos, rows[i], i)
        return obs, rewards, terminated, truncated, infos

    def step_rows(
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[int, dict], dict[int, tuple[Any, dict]]]:
        """``step`` with the infos by sub-env, not packed in gymnasium's vector form (the runner's
        stepper reads them so): (obs, rewards, terminated, truncated, infos, finals). ``infos``
        holds each sub-env's non-empty info (where an episode ended, its reset's); ``finals`` the
        (last observation, last info) of each episode that ended."""
        self.failed = []
        infos: dict[int, dict] = {}
        finals: dict[int, tuple[Any, dict]] = {}
        rows = (
            iter(actions)
            if self._row_actions and isinstance(actions, np.ndarray)
            else iterate(self.action_space, actions)
        )
        checking = self._checking
        for i, action in enumerate(rows):
            try:
                result = self.envs[i].step(action)
            except Exception as e:  # the sub-env's own failure: restart it alone (or raise EnvError)
                self.num_stepped_before_error = i - len(self.failed)
                env_info = self._restart(i, "step", e)
                self.failed.append(i)
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                try:
                    obs, reward, terminated, truncated, env_info = result
                except (TypeError, ValueError):
                    self.num_stepped_before_error = i + 1 - len(self.failed)  # its step happened: dropped, counted
                    raise self._broken_api(i, "step", result) from None
                if checking and self._checks_left[i]:
                    self.num_stepped_before_error = i + 1 - len(self.failed)  # in case the check refuses it
                    self._check(i, "step", obs)
                self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i] = (
                    obs,
                    reward,
                    terminated,
                    truncated,
                )
                if terminated or truncated:
                    finals[i] = (obs, env_info)
                    try:
                        reset = self.envs[i].reset()
                    except Exception as e:  # the episode ended normally; only its autoreset failed
                        self.num_stepped_before_error = i + 1 - len(self.failed)
                        env_info = self._restart(i, "reset", e)
                    else:
                        self.num_stepped_before_error = i + 1 - len(self.failed)  # in case the reset is refused
                        self._env_obs[i], env_info = self._reset_result(i, reset)
            if env_info:
                infos[i] = env_info
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        self.num_stepped_before_error = len(self.envs) - len(self.failed)  # in case the batch is refused
        return (
            self._batched_observations(),
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
            finals,
        )

    def _batched_observations(self) -> Any:
        """The sub-envs' observations batched, as gymnasium's ``concatenate`` (and copy) gives them."""
        if self._obs_batch is not None:
            dtype, shape = self._obs_batch
            with contextlib.suppress(ValueError, TypeError):  # a ragged or odd row: gymnasium's way says what
                batch = np.array(self._env_obs)
                if batch.shape == shape and batch.dtype == dtype:  # else gymnasium's casting rules decide
                    self._observations = batch
                    return batch  # new each step: the caller owns it
        try:
            self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        except (ValueError, TypeError) as e:  # numpy's "Output array is the wrong shape": say whose and what
            space = self.single_observation_space
            rows = enumerate(self._env_obs)
            found = next(((i, d) for i, o in rows if (d := describe_outside(space, o, non_finite_ok=True))), None)
            if found is None:
                raise
            raise EnvError(
                f"sub-env worker_index={self.worker_index}, vector_index={found[0]} returned {found[1]}"
            ) from e
        return deepcopy(self._observations) if self.copy else self._observations

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
                result = env.reset(seed=single_seed, options=options)
            except Exception as e:
                env_info = self._restart(i, "reset", e)
            else:
                self._env_obs[i], env_info = self._reset_result(i, result)
            infos = self._add_info(infos, env_info, i)
        return self._batched_observations(), infos

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
        if self._check_steps > 0 and not self._checks_left[i]:
            self._num_checking += 1
            self._checking = True
        self._checks_left[i] = self._check_steps
        seed = self._reset_seed(i, self._restarts_of[i]) if self._reset_seed is not None else None
        try:
            result = self.envs[i].reset(seed=seed)
        except Exception as e:
            raise EnvError(f"sub-env {where} raised in reset() right after a restart: {e!r}") from e
        self._env_obs[i], env_info = self._reset_result(i, result)
        return env_info

    def _reset_result(self, i: int, result: Any) -> tuple[Any, dict]:
        """Sub-env ``i``'s ``reset()`` result, checked (see the module docstring)."""
        try:
            obs, info = result
        except (TypeError, ValueError):
            raise self._broken_api(i, "reset", result) from None
        if not isinstance(info, dict):  # an observation of two values unpacks too
            raise self._broken_api(i, "reset", result)
        if self._checks_left[i]:
            self._check(i, "reset", obs)
        return obs, info

    def _broken_api(self, i: int, phase: str, result: Any) -> EnvError:
        got = f"a tuple of {len(result)}" if isinstance(result, tuple) else f"a {type(result).__name__}"
        if phase == "reset":
            want, old = "(observation, info)", "the old gym API returned the observation alone"
        else:
            want, old = (
                "(observation, reward, terminated, truncated, info)",
                ("the old gym API returned (observation, reward, done, info)"),
            )
        where = f"worker_index={self.worker_index}, vector_index={i}"
        return EnvError(f"sub-env {where}: {phase}() must return {want}, gymnasium's API (got {got}; {old})")

    def _check(self, i: int, phase: str, obs: Any) -> None:
        """Counts one of sub-env ``i``'s checked calls; EnvError if ``obs`` is outside the space."""
        self._checks_left[i] -= 1
        if not self._checks_left[i]:
            self._num_checking -= 1
            self._checking = self._num_checking > 0
        # NaN and inf are the finite-data check's (EnvRunnerConfig.check_env_data), with its own switch.
        outside = describe_outside(self.single_observation_space, obs, non_finite_ok=True)
        if outside is not None:
            call = self._check_steps - self._checks_left[i] - 1
            raise EnvError(
                f"sub-env worker_index={self.worker_index}, vector_index={i} returned {outside} in {phase}() "
                f"(its call {call} since it was built; EnvRunnerConfig(check_env_first_steps=0) turns this "
                "check off)"
            )


def _returning(env: gym.Env) -> Callable[[], gym.Env]:
    """A thunk giving back an env already made (SyncVectorEnv takes env factories)."""
    return lambda: env
