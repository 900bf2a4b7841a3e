"""VectorStepper: one view of a gymnasium vector env whatever autoreset mode it reports.

Gymnasium vector envs reset finished sub-envs in one of three ways (``metadata["autoreset_mode"]``):

- ``SAME_STEP``: the step that ends an episode returns the *reset* observation; the real last
  observation and info sit in ``infos["final_obs"]`` / ``infos["final_info"]``.
- ``NEXT_STEP``: the step after the end is a reset: its action is ignored, it returns the reset
  observation with reward 0 and no flags. It is not a transition and must not be recorded.
- ``DISABLED``: the caller resets finished sub-envs itself (``reset(options={"reset_mask": ...})``).

``step()`` turns each into the same :class:`VectorStep`: the transitions that really happened
(``valid`` marks which sub-envs made one) and the sub-envs that began a new episode, with their
reset observations.

Failures: a sub-env that raised and was rebuilt appears in ``VectorStep.failed`` (no transition,
its fresh reset observation): its running episode ends there, unfinished. The runner's own
``SubEnvVector`` rebuilds the one sub-env that raised; a native vector env cannot rebuild one
sub-env, so with ``rebuild`` given the stepper closes it, builds a new one and resets it whole
(every sub-env is then in ``failed``); without ``rebuild`` it raises ``EnvError``.

Bad data (``check_data``): NaN or inf in a reward or in any float leaf of an observation (the
batched ones, and ``final_obs``) raises ``EnvError`` naming the sub-env, after the step's
transitions are counted, so the runner drops and counts them like any sub-env failure's. One
``isfinite`` over each batched array per step (a few us); the sub-env is looked up only on failure.

Rewards are float64 on every path: a native vector env's (ALE's are int32) are converted here,
once per step, into a new array (nothing the env owns is written into); float64 ones pass as they are.
Observations and flags are put in the runner's form here too (``data.spaces.to_numpy_batch``): a
``Text`` leaf as a batch of whole strings, and arrays from JAX or torch (or any numpy array the
runner may not write) copied into numpy ones; numpy arrays pass as they are.

Episode ends: with ``soft_horizon`` or ``no_done_at_end`` on, the stepper's ``EpisodeEnds``
(module ``horizon``) rewrites each step's flags and resets last, after the data check; a soft cut
is a reset in the same step whose observation is the one the cut episode ended with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.spaces import batch_converter, is_string_leaf, item_converter, owned_array
from ray_sampler.errors import EnvError
from ray_sampler.sampling.env_check import describe_non_finite
from ray_sampler.sampling.horizon import EpisodeEnds
from ray_sampler.sampling.sub_envs import SubEnvVector

__all__ = ["VectorStep", "VectorStepper"]

_FINAL_KEYS = ("final_obs", "_final_obs", "final_info", "_final_info")


@dataclasses.dataclass
class VectorStep:
    """What one vector step did, batched over sub-envs (index ``i`` is sub-env ``i``)."""

    obs: Any
    """Batched observation each transition led to, except where ``final_obs`` overrides it."""
    final_obs: dict[int, Any]
    """Real last observation of sub-envs whose batched ``obs`` row already holds a reset one."""
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[int, dict]
    """Non-empty infos of transitions, by sub-env (absent: ``{}``)."""
    valid: np.ndarray
    """Whether sub-env ``i`` made a transition (False on a NEXT_STEP reset step)."""
    resets: dict[int, tuple[Any, dict]]
    """Sub-envs that began a new episode in this step: index -> (reset observation, reset info)."""
    current_obs: Any
    """Batched observation the policy acts on next (reset observations where a sub-env restarted)."""
    failed: dict[int, tuple[Any, dict]] = dataclasses.field(default_factory=dict)
    """Sub-envs that raised and were rebuilt in this step: index -> (fresh reset observation, info)."""
    num_unrecorded: int = 0
    """Transitions made in this step that belong to episodes a failure ended (not in ``valid``)."""

    def next_obs_rows(self) -> list[Any]:
        """Per-sub-env observation each transition led to."""
        rows = _rows(self.obs, len(self.valid))
        for i, obs in self.final_obs.items():
            rows[i] = obs
        return rows

    def info_rows(self) -> list[dict]:
        """Per-sub-env transition infos (fresh dicts)."""
        return [self.infos.get(i) or {} for i in range(len(self.valid))]


def _rows(batch: Any, n: int) -> list[Any]:
    """Per-sub-env items of a batched (possibly nested) observation."""
    if isinstance(batch, np.ndarray):
        return list(batch)
    return [tree.map_structure(lambda a, i=i: a[i], batch) for i in range(n)]


def _python(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def own_info(info: dict) -> dict:
    """One sub-env's info as ``split_infos`` gives it back from gymnasium's vector form: new dicts
    (nested ones too), numpy scalars as Python ones, other values as they are."""
    return {k: own_info(v) if isinstance(v, dict) else _python(v) for k, v in info.items()}


def split_infos(infos: dict, n: int) -> list[dict]:
    """Gymnasium's vector infos (dict of arrays with ``_key`` masks; nested dicts in the same
    form) -> one dict per sub-env. ``final_obs``/``final_info`` are left out."""
    out: list[dict] = [{} for _ in range(n)]
    if not infos:
        return out
    for key, values in infos.items():
        if key.startswith("_") or key in _FINAL_KEYS:
            continue
        mask = infos.get("_" + key)
        per_env = split_infos(values, n) if isinstance(values, dict) else None
        for i in range(n):
            if mask is None or mask[i]:
                out[i][key] = per_env[i] if per_env is not None else _python(values[i])
    return out


class VectorStepper:
    """Steps a vector env and reports real transitions only (see the module docstring)."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        *,
        worker_index: int = 0,
        rebuild: Callable[[], tuple[gym.vector.VectorEnv, Any]] | None = None,
        check_data: bool = False,
        ends: EpisodeEnds | None = None,
    ) -> None:
        self.env = env
        self._to_numpy = batch_converter(env.single_observation_space)
        self._item_to_numpy = item_converter(env.single_observation_space)
        self.check_data = check_data
        """Refuse NaN or inf in rewards and observations (``EnvError``; see the module docstring)."""
        self.ends = ends
        """Soft-horizon cuts and ``no_done_at_end`` (see ``horizon``); None: the env's ends as they are."""
        self.num_envs = env.num_envs
        self.worker_index = worker_index
        self._rebuild = rebuild
        """Native vector envs: a new vector env and the seeds of its first reset (None: fail)."""
        self.mode = gym.vector.AutoresetMode(env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP))
        self._sub_envs = env if isinstance(env, SubEnvVector) else None
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._all_valid = np.ones(self.num_envs, dtype=bool)
        self._num_rebuilds = 0
        self.num_transitions = 0
        """Transitions made so far (what a failed call had made, for its count of dropped steps)."""

    @property
    def num_restarts(self) -> int:
        """Sub-envs rebuilt so far (a whole native vector env counts as one)."""
        return self._num_rebuilds + (self._sub_envs.num_restarts if self._sub_envs is not None else 0)

    def reset(self, seeds: list[int] | None = None) -> tuple[list[Any], list[dict], Any]:
        """Resets every sub-env: (observations, infos, batched observation)."""
        try:
            obs, infos = self.env.reset(seed=seeds)  # type: ignore[arg-type]  # vector envs take one seed per sub-env
        except Exception as e:
            obs, infos = self._rebuilt(e, "reset")
        obs = self._to_numpy(obs)
        self._needs_reset[:] = False
        if self.ends is not None:
            self.ends.restart()
        if self.check_data:
            self._check_finite(obs, None, {})
        return _rows(obs, self.num_envs), split_infos(infos, self.num_envs), obs

    def _rebuilt(self, cause: Exception, phase: str) -> tuple[Any, dict]:
        """A native vector env raised: closes it, builds a new one and resets it (or raises EnvError)."""
        if isinstance(cause, EnvError):  # SubEnvVector has said which sub-env, and restarts are off
            if self._sub_envs is not None and phase == "step":
                self.num_transitions += self._sub_envs.num_stepped_before_error  # made, never recorded
            raise cause
        where = f"the vector env of worker_index={self.worker_index}" + (
            "" if self._sub_envs is not None else " (native: vector_index unknown)"
        )
        if self._rebuild is None:
            raise EnvError(f"{where} raised in {phase}(): {cause!r}") from cause
        with contextlib.suppress(Exception):  # a broken env may fail to close; it is replaced either way
            self.env.close()
        self.env, seeds = self._rebuild()
        self._num_rebuilds += 1
        self._needs_reset[:] = False
        try:
            obs, infos = self.env.reset(seed=seeds)
            return self._to_numpy(obs), infos
        except Exception as e:
            raise EnvError(f"{where} raised in reset() right after a rebuild: {e!r}") from e

    def _all_failed(self, cause: Exception, phase: str = "step") -> VectorStep:
        """The step of a native vector env that raised and was rebuilt: every sub-env failed."""
        obs, infos = self._rebuilt(cause, phase)
        n = self.num_envs
        dicts = split_infos(infos, n)
        failed = {i: (_row(obs, i), dicts[i]) for i in range(n)}
        flags = np.zeros(n, dtype=bool)
        return VectorStep(obs, {}, np.zeros(n), flags, flags.copy(), {}, flags.copy(), {}, obs, failed)

    def step(self, actions: Any) -> VectorStep:
        step = self._step(actions)
        if self.check_data:
            self._check_finite(step.obs, step.rewards, step.final_obs)
            if step.current_obs is not step.obs:
                self._check_finite(step.current_obs, None, {})
        if self.ends is not None:
            step = self.ends.apply(step)
        return step

    def _check_finite(self, obs: Any, rewards: np.ndarray | None, final_obs: dict[int, Any]) -> None:
        """Raises EnvError naming the first sub-env with NaN or inf in a reward or an observation."""
        # Fast path: one sum over each float array is finite iff every value is (NaN and inf
        # propagate; inf - inf is NaN). A finite-value overflow only sends us down the exact path.
        total = _float_sum(obs) + (_float_sum(rewards) if rewards is not None else 0.0)
        for final in final_obs.values():  # only at episode ends
            total += _float_sum(final)
        if math.isfinite(total):
            return
        found = None
        if rewards is not None and rewards.dtype.kind == "f" and not np.isfinite(rewards).all():
            i = int(np.flatnonzero(~np.isfinite(rewards))[0])
            found = i, f"reward {rewards[i]}"
        if found is None and not math.isfinite(_float_sum(obs)):
            rows = ((i, describe_non_finite(_row(obs, i), "observation")) for i in range(self.num_envs))
            found = next(((i, d) for i, d in rows if d is not None), None)
        if found is None:
            finals = ((i, describe_non_finite(o, "final observation")) for i, o in final_obs.items())
            found = next(((i, d) for i, d in finals if d is not None), None)
        if found is not None:
            raise EnvError(
                f"sub-env worker_index={self.worker_index}, vector_index={found[0]} returned {found[1]} "
                "(observations and rewards must be finite; EnvRunnerConfig(check_env_data=False) lets them through)"
            )

    def _step(self, actions: Any) -> VectorStep:
        infos: dict[str, Any] = {}
        ends: dict[int, tuple[Any, dict]] | None = None
        try:
            if self._sub_envs is not None:  # infos by sub-env already: nothing to pack and split again
                obs, rewards, terminated, truncated, rows, finals = self._sub_envs.step_rows(actions)
                sparse = {i: own_info(d) for i, d in rows.items()}
                ends = {i: (last, own_info(d)) for i, (last, d) in finals.items()}
            else:
                obs, rewards, terminated, truncated, infos = self.env.step(actions)
                dense = split_infos(infos, self.num_envs) if infos else None
                sparse = {i: d for i, d in enumerate(dense) if d} if dense else {}
        except Exception as e:
            return self._all_failed(e)
        # One reward dtype on every path (see the module docstring); a new array where it converts.
        rewards = owned_array(rewards).astype(np.float64, copy=False)
        obs = self._to_numpy(obs)
        terminated, truncated = _flags(terminated), _flags(truncated)
        n = self.num_envs
        if self.mode is gym.vector.AutoresetMode.SAME_STEP:
            valid, failed = self._all_valid, {}
            if self._sub_envs is not None and self._sub_envs.failed:
                failed = {i: (_row(obs, i), sparse.pop(i, {})) for i in self._sub_envs.failed}
                valid = valid.copy()
                valid[list(failed)] = False
            self.num_transitions += n - len(failed)
            final_obs: dict[int, Any] = {}
            resets: dict[int, tuple[Any, dict]] = {}
            # The ended sub-envs, in order: SubEnvVector has listed them.
            done = list(ends) if ends is not None else np.flatnonzero(terminated | truncated).tolist()
            if done:
                if ends is None:
                    final_infos = split_infos(infos.get("final_info", {}), n)
                    ends = {i: (infos["final_obs"][i], final_infos[i]) for i in done}
                for i, row in zip(done, _rows_at(obs, done), strict=True):
                    last_obs, last_info = ends[i]
                    final_obs[i] = self._item_to_numpy(last_obs)
                    resets[i] = (row, sparse.pop(i, {}))
                    if last_info:
                        sparse[i] = last_info
            return VectorStep(obs, final_obs, rewards, terminated, truncated, sparse, valid, resets, obs, failed)
        if self.mode is gym.vector.AutoresetMode.NEXT_STEP:
            valid = ~self._needs_reset
            starting = np.flatnonzero(self._needs_reset).tolist()
            resets = {i: (row, sparse.pop(i, {})) for i, row in zip(starting, _rows_at(obs, starting), strict=True)}
            self._needs_reset = (terminated | truncated) & valid
            self.num_transitions += int(np.count_nonzero(valid))
            return VectorStep(obs, {}, rewards, terminated, truncated, sparse, valid, resets, obs)
        # DISABLED: reset the finished sub-envs ourselves.
        done_mask = terminated | truncated
        self.num_transitions += n
        resets, current = {}, obs
        if done_mask.any():
            try:
                reset_obs, reset_infos = self.env.reset(options={"reset_mask": done_mask})
                reset_obs = self._to_numpy(reset_obs)
            except Exception as e:
                # The step's transitions happened, but the env is rebuilt before the next one: the
                # finished episodes end normally; the others' running episodes end here.
                # Only the finished sub-envs' transitions are kept (the others' episodes are dropped).
                step = self._all_failed(e, "reset")
                for i in np.flatnonzero(done_mask).tolist():
                    resets[i] = step.failed.pop(i)
                return VectorStep(
                    obs,
                    {},
                    rewards,
                    terminated,
                    truncated,
                    sparse,
                    done_mask,
                    resets,
                    step.obs,
                    step.failed,
                    num_unrecorded=n - int(done_mask.sum()),
                )
            reset_dicts = split_infos(reset_infos, n)
            done = np.flatnonzero(done_mask).tolist()
            resets = {i: (row, reset_dicts[i]) for i, row in zip(done, _rows_at(reset_obs, done), strict=True)}
            current = reset_obs
        return VectorStep(obs, {}, rewards, terminated, truncated, sparse, self._all_valid, resets, current)


def _float_sum(batch: Any) -> float:
    """The sum of every float value in a batched (possibly nested) array: NaN or inf if any is."""
    if isinstance(batch, np.ndarray):
        return float(np.add.reduce(batch, axis=None)) if batch.dtype.kind == "f" else 0.0
    if isinstance(batch, (float, np.floating)):
        return float(batch)
    return sum(_float_sum(leaf) for leaf in tree.flatten(batch)) if tree.is_structure(batch) else 0.0


def _row(batch: Any, i: int) -> Any:
    """Sub-env ``i``'s item of a batched (possibly nested) observation, copied (a string leaf's as
    its ``str``)."""
    if isinstance(batch, np.ndarray) and not is_string_leaf(batch):
        return batch[i].copy()
    return tree.map_structure(lambda a: str(a[i]) if is_string_leaf(a) else np.array(a[i]), batch)


def _rows_at(batch: Any, idx: list[int]) -> list[Any]:
    """Sub-envs ``idx``'s items of a batched observation, copied: one gather for a plain array
    (the rows are views of that new array), else ``_row`` each."""
    if idx and isinstance(batch, np.ndarray) and not is_string_leaf(batch):
        return list(batch[idx])
    return [_row(batch, i) for i in idx]


def _flags(flags: Any) -> np.ndarray:
    """Terminated or truncated flags as a bool numpy array the runner may write."""
    return owned_array(flags).astype(bool, copy=False)
