"""check_env: refuses an env whose data would poison training, on the driver, before any actor starts.

``EnvRunnerGroup`` runs it when ``validate_env_locally`` and ``check_env`` are both on. It builds
one env (``worker_index=0``, like ``validate_env_locally``) and:

1. runs gymnasium's env checker (``gymnasium.utils.env_checker.check_env``'s checks, less its
   seed-determinism checks, which are about reproducibility rather than data, and its render and
   close checks: sampling never renders). Its assertion errors are refusals. Of its warnings
   (none is ever printed):

   - refusals: the old 4-tuple step API, ``reset()`` not returning ``(obs, info)``, observations
     that share objects between calls (a stored observation would change under us), a Box whose
     ``low > high``, and the data warnings (observation outside the space, NaN or inf reward,
     reward or flags of the wrong type), which step 2 refuses again with the step and index (a
     data warning step 2 does not reproduce is raised as gymnasium worded it);
   - ignored (logged at DEBUG): advice that does not change the data we record: infinite or
     asymmetric Box bounds, dtype or container hints (``space.contains`` decides), deprecated
     ``seed()`` / ``return_info``, a non-None default seed (we always seed), render metadata.

2. steps the env with seeded random actions for ``num_steps`` steps (resetting when episodes
   end) and refuses: NaN or inf in any float leaf of an observation, or in a reward; an
   observation outside ``observation_space`` (``space.contains``); a reward that is not a real
   number (None, a str, an array of size != 1, a complex number, and a bool: a bool reward is
   almost always the flags returned in the wrong place); ``terminated`` / ``truncated`` that are
   not bools (Python or numpy); a ``step()`` that does not return 5 values.

Each refusal is one ``EnvCheckError`` (a ConfigError: the CLI exits with code 2) naming the env,
the step (the first reset is step 0; a reset after step t is "the reset after step t") and what
is allowed, e.g. ``env 'NaNObs-v0' failed its check at step 3: observation has NaN at index [1]
(observations must be finite)``.

Bad data that appears only later, on a runner: the runner refuses NaN and inf in observations
and rewards at every vector step (``EnvRunnerConfig.check_env_data``, vectorized over the
sub-envs: about 4 us per vector step; see ``VectorStepper``), and observations outside their space
in each sub-env's first ``check_env_first_steps`` calls (``SubEnvVector``; not later: a
``space.contains`` per sub-env per step would cost more than the sampling it guards). The
sampling call raises ``EnvError`` naming the sub-env, so its data is never shipped, and the group
counts it as a runner failure (replaced, or ``EnvRunnerFailedError``). A vector-env creator's
vector env is not checked here (gymnasium's checker takes single envs) nor against its space on
the runners: only its NaN and inf are.
"""

from __future__ import annotations

import copy
import logging
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import env_checker, passive_env_checker

from ray_sampler.errors import EnvCheckError
from ray_sampler.sampling.env_creator import env_name, make_one_env

__all__ = ["DEFAULT_NUM_STEPS", "check_env", "describe_non_finite"]

DEFAULT_NUM_STEPS = 300
"""Random steps ``check_env`` takes (a few ms for CartPole)."""

_HOW_TO_SKIP = "turn the check off with --no-env-check (EnvRunnerGroupConfig(check_env=False))"

# gymnasium warnings we refuse; any other is ignored (see the module docstring).
_REFUSED = re.compile(r"old step API|was not a tuple|should be `\(obs, info\)`|share an|low value is greater")
# Data warnings: step 2 refuses them with the step and index; kept in case it does not.
_DATA = re.compile(r"not within the observation space|reward is an? (NaN|inf)|reward returned by|Expects `")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# gymnasium's check_env, less its seed-determinism checks (reproducibility, not data: a runner may
# use an env that stamps each instance) and its render and close checks (sampling never renders).
_GYMNASIUM_CHECKS: tuple[Callable[[gym.Env], object], ...] = (
    lambda env: passive_env_checker.check_action_space(env.action_space),
    lambda env: env_checker.check_space_limit(env.action_space, "action"),
    lambda env: passive_env_checker.check_observation_space(env.observation_space),
    lambda env: env_checker.check_space_limit(env.observation_space, "observation"),
    env_checker.check_seed_deprecation,
    env_checker.check_reset_return_info_deprecation,
    env_checker.check_reset_return_type,
    env_checker.check_reset_options,
    passive_env_checker.env_reset_passive_checker,
    lambda env: passive_env_checker.env_step_passive_checker(env, env.action_space.sample()),
)

_logger = logging.getLogger(__name__)


def check_env(
    env: str | Callable[..., Any],
    env_config: Mapping[str, Any] | None = None,
    *,
    num_steps: int = DEFAULT_NUM_STEPS,
    seed: int | None = 0,
    max_episode_steps: int | None = None,
    tolerate_errors: bool = False,
) -> None:
    """Builds ``env`` (a gymnasium id, a registered name or a creator) with ``env_config`` and
    raises ``EnvCheckError`` if it fails gymnasium's env checker or returns bad data within
    ``num_steps`` seeded random steps (see the module docstring).

    An env that raises in ``reset()`` or ``step()`` is refused too (the error named, one line),
    unless ``tolerate_errors`` (the runners rebuild failing sub-envs: ``restart_failed_sub_environments``):
    then the check ends there, with what it saw until then; gymnasium's API assertions still refuse.

    >>> check_env("CartPole-v1", num_steps=50)
    """
    name = env_name(env)
    try:  # the check's env must not change objects the runners get later (a counter in env_config, say)
        config = copy.deepcopy(dict(env_config or {}))
    except Exception:  # not copyable: shared, as validate_env_locally shares it
        config = dict(env_config or {})
    instance = make_one_env(env, config, max_episode_steps=max_episode_steps)
    if isinstance(instance, gym.vector.VectorEnv):  # gymnasium's checker takes single envs
        instance.close()
        _logger.debug("check_env(%r): a vector-env creator: not checked (the runners refuse its NaN and inf)", name)
        return
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                data_warning = _run_gymnasium_checker(instance, name)
                _step_randomly(instance, name, num_steps, seed)
            except _EnvRaised as e:
                if not tolerate_errors:
                    raise EnvCheckError(f"env {name!r} raised during its check: {e.cause!r}; {_HOW_TO_SKIP}") from None
                _logger.debug("check_env(%r): ended early, the env raised %r (tolerated)", name, e.cause)
                data_warning = None
        for w in caught:
            _logger.debug("check_env(%r): ignored %s", name, _ANSI.sub("", str(w.message)))
    finally:
        instance.close()
    if data_warning is not None:
        raise EnvCheckError(f"env {name!r} failed gymnasium's env checker: {data_warning}; {_HOW_TO_SKIP}")


def _run_gymnasium_checker(env: gym.Env, name: str) -> str | None:
    """Gymnasium's checker on ``env``: raises on its errors and refused warnings; returns its first
    data warning (None: none) for ``_step_randomly`` to word better."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for check in _GYMNASIUM_CHECKS:
                check(_Raising(env))
        except _EnvRaised:
            raise
        except Exception as e:  # its assertions and errors: the env breaks gymnasium's API
            message = _one_line(str(e) or type(e).__name__)
            raise EnvCheckError(f"env {name!r} failed gymnasium's env checker: {message}; {_HOW_TO_SKIP}") from e
    data_warning = None
    for w in caught:
        message = _one_line(_ANSI.sub("", str(w.message)).removeprefix("WARN: "))
        if _REFUSED.search(message):
            raise EnvCheckError(f"env {name!r} failed gymnasium's env checker: {message}; {_HOW_TO_SKIP}")
        if _DATA.search(message) and data_warning is None:
            data_warning = message
        _logger.debug("check_env(%r): ignored gymnasium warning: %s", name, message)
    return data_warning


class _EnvRaised(Exception):  # not an error of ours: carries the env's own
    """The env raised in ``reset()`` or ``step()`` (``cause``)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Raising(gym.Wrapper):
    """``env`` with what its ``reset()`` and ``step()`` raise wrapped in ``_EnvRaised``."""

    def reset(self, **kwargs: Any) -> Any:
        try:
            return self.env.reset(**kwargs)
        except Exception as e:
            raise _EnvRaised(e) from e

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except Exception as e:
            raise _EnvRaised(e) from e


def _step_randomly(env: gym.Env, name: str, num_steps: int, seed: int | None) -> None:
    """``num_steps`` seeded random steps, refusing the first bad value (see the module docstring)."""
    env = _Raising(env)

    def refuse(where: str, problem: str) -> EnvCheckError:
        return EnvCheckError(f"env {name!r} failed its check at {where}: {problem}; {_HOW_TO_SKIP}")

    space = env.observation_space
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    if (problem := _observation_problem(obs, space)) is not None:
        raise refuse("step 0", problem)
    for t in range(1, num_steps + 1):
        result = env.step(env.action_space.sample())
        if not isinstance(result, tuple) or len(result) != 5:
            raise refuse(f"step {t}", "step() must return (obs, reward, terminated, truncated, info)")
        obs, reward, terminated, truncated, _ = result
        for problem in (
            _observation_problem(obs, space),
            _reward_problem(reward),
            _flag_problem("terminated", terminated),
            _flag_problem("truncated", truncated),
        ):
            if problem is not None:
                raise refuse(f"step {t}", problem)
        if terminated or truncated:
            obs, _ = env.reset()
            if (problem := _observation_problem(obs, space)) is not None:
                raise refuse(f"the reset after step {t}", problem)


def _observation_problem(obs: Any, space: gym.Space) -> str | None:
    non_finite = describe_non_finite(obs, "observation")
    if non_finite is not None:
        return f"{non_finite} (observations must be finite)"
    if not space.contains(obs):
        return f"observation {_short(obs)} is outside the observation space (must be in {space})"
    return None


def _reward_problem(reward: Any) -> str | None:
    allowed = "rewards must be real numbers: int, float or a numpy number or size-1 array, not bool"
    value = reward
    if isinstance(reward, np.ndarray) and reward.size == 1:
        value = reward.reshape(()).item()
    elif isinstance(reward, np.generic):
        value = reward.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"reward is {_short(reward)} of type {type(reward).__qualname__} ({allowed})"
    if not np.isfinite(value):
        return f"reward is {value} (rewards must be finite)"
    return None


def _flag_problem(name: str, flag: Any) -> str | None:
    if isinstance(flag, (bool, np.bool_)):
        return None
    return f"{name} is {_short(flag)} of type {type(flag).__qualname__} ({name} must be a bool or numpy bool)"


def describe_non_finite(value: Any, what: str) -> str | None:
    """Where ``value`` (a number, an array, or a dict / tuple of them) first holds NaN or inf, as
    ``"{what}['pos'] has NaN at index [1]"``; None when every float leaf is finite."""
    if isinstance(value, Mapping):
        items: Any = ((f"[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, tuple):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        if isinstance(value, bool) or not isinstance(value, (float, np.floating, np.ndarray)):
            return None
        array = np.asarray(value)
        if array.dtype.kind not in "fc":
            return None
        bad = ~np.isfinite(array)
        if not bad.any():
            return None
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        kind = "NaN" if np.isnan(array[index]) else "inf"
        return f"{what} has {kind}" + (f" at index {list(index)}" if index else "")
    for key, leaf in items:
        found = describe_non_finite(leaf, what + key)
        if found is not None:
            return found
    return None


def _short(value: Any) -> str:
    text = np.array2string(value, threshold=8) if isinstance(value, np.ndarray) else repr(value)
    return _one_line(text if len(text) <= 80 else text[:77] + "...")


def _one_line(text: str) -> str:
    return " ".join(text.split()).rstrip(".")
