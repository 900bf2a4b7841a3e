"""Test fixtures: a counting env, a catalogue of spaces, episode builders and an exact comparison (model
outputs from another process within a stated tolerance)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.episode import SingleAgentEpisode

__all__ = [
    "MODEL_OUTPUTS_TOL",
    "SPACES",
    "STAMP_ID",
    "CountingEnv",
    "StampEnv",
    "assert_episodes_equal",
    "episode_from_space",
    "full_state",
    "stamp_creator",
    "stamp_length",
]


class CountingEnv(gym.Env):
    """obs = [t], reward = t (for the step that led to obs t), terminated at t == episode_len."""

    def __init__(self, episode_len: int = 5) -> None:
        self.episode_len = episode_len
        self.observation_space = gym.spaces.Box(0, 10**9, shape=(1,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0]), {"t": 0}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.array([self.t]), float(self.t), self.t >= self.episode_len, False, {"t": self.t}


def stamp_length(vector: int, episode: int) -> int:
    """Length of episode ``episode`` of sub-env ``vector`` in StampEnv: 2..8, varying."""
    return 2 + (3 * episode + vector) % 7


class StampEnv(gym.Env):
    """obs = [worker, vector, episode, t]; reward = t; episode k of sub-env v lasts stamp_length(v, k).

    Infos: ``{"episode": k}`` at reset, ``{"t": t}`` after each step. Every step is identifiable,
    so tests can check that each appears exactly once and carries its own info.
    """

    def __init__(self, worker: int = 0, vector: int = 0, sleep_s: float = 0.0) -> None:
        self.worker, self.vector, self.sleep_s = worker, vector, sleep_s
        self.observation_space = gym.spaces.Box(0, 10**9, shape=(4,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t = -1, 0
        self.actions_seen: list[Any] = []

    def _obs(self) -> np.ndarray:
        return np.array([self.worker, self.vector, self.episode, self.t])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {"episode": self.episode}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.sleep_s:
            import time

            time.sleep(self.sleep_s)
        self.actions_seen.append(action)
        self.t += 1
        return self._obs(), float(self.t), self.t >= stamp_length(self.vector, self.episode), False, {"t": self.t}


def stamp_creator(ctx: Any) -> StampEnv:
    """Creator: a StampEnv stamped with the sub-env's indices; ``ctx["slow_worker"]`` sleeps."""
    sleep = ctx.get("sleep_s", 0.0) if ctx.get("slow_worker") == ctx["worker_index"] else 0.0
    return StampEnv(ctx["worker_index"], ctx["vector_index"], sleep)


def stamp_vector_env(num_envs: int = 1, autoreset_mode: str = "NextStep", **kwargs: Any) -> gym.vector.VectorEnv:
    """A 'native' vector StampEnv reporting the given autoreset mode."""
    return gym.vector.SyncVectorEnv(
        [lambda v=v: StampEnv(0, v) for v in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode(autoreset_mode)
    )


STAMP_ID = "RaySamplerStamp-v0"
if STAMP_ID not in gym.registry:
    gym.register(STAMP_ID, entry_point="tests.helpers:StampEnv", vector_entry_point="tests.helpers:stamp_vector_env")


SPACES: dict[str, gym.Space] = {
    "box_f32_3": gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
    "box_u8_image": gym.spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8),
    "box_f64_scalar": gym.spaces.Box(-5.0, 5.0, shape=(), dtype=np.float64),
    "box_i16_2x2": gym.spaces.Box(-100, 100, shape=(2, 2), dtype=np.int16),
    "discrete": gym.spaces.Discrete(5),
    "discrete_start": gym.spaces.Discrete(3, start=-1),
    "multi_discrete": gym.spaces.MultiDiscrete([3, 4, 2]),
    "multi_binary": gym.spaces.MultiBinary(4),
    "dict": gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "id": gym.spaces.Discrete(4)}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,), np.float32))),
    "nested": gym.spaces.Dict(
        {
            "a": gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))),
            "b": gym.spaces.Dict({"c": gym.spaces.MultiDiscrete([2, 3]), "d": gym.spaces.Box(0, 9, (), np.int32)}),
        }
    ),
}


def episode_from_space(
    obs_space: gym.Space,
    action_space: gym.Space,
    num_steps: int,
    *,
    seed: int = 0,
    terminated: bool = False,
    extra: bool = True,
) -> SingleAgentEpisode:
    """A list-form episode with ``num_steps`` random steps from the spaces (seeded)."""
    obs_space.seed(seed)
    action_space.seed(seed + 1)
    ep = SingleAgentEpisode(observation_space=obs_space, action_space=action_space)
    ep.add_env_reset(obs_space.sample(), {"start": seed})
    for t in range(num_steps):
        ep.add_env_step(
            obs_space.sample(),
            action_space.sample(),
            float(t) - 0.5,
            {"t": t} if t % 3 == 0 else None,
            terminated=terminated and t == num_steps - 1,
            extra_model_outputs={"action_logp": np.float32(-t / 10), "vf_preds": np.float32(t)} if extra else None,
        )
    return ep


def full_state(ep: SingleAgentEpisode) -> dict[str, Any]:
    """Everything in ``ep``, lookback included, in numpy form (``ep`` itself is not changed); the
    recording clock (``get_duration_s``) is left out: it is not data."""
    state = SingleAgentEpisode.from_state(ep.get_state()).to_numpy().get_state()
    del state["observation_space"], state["action_space"], state["start_time"], state["last_step_time"]
    return state


MODEL_OUTPUTS_TOL = {"rtol": 1e-5, "atol": 1e-7}
"""How close two processes' float32 model outputs (logits, values, logp) must be: a forward pass in
another process, on a cluster on another CPU, runs other BLAS kernels (and thread counts), which move
the last bits (measured with OPENBLAS_CORETYPE: about 1e-6 of the values, 2e-9 absolute on logits of
1e-4); a value weight moved by 1e-3, or another policy's weights, move them far more."""


def assert_episodes_equal(
    a: SingleAgentEpisode,
    b: SingleAgentEpisode,
    *,
    compare_ids: bool = True,
    model_outputs_tol: dict[str, float] | None = None,
) -> None:
    """Field-by-field equality (values, dtypes, nesting, lookback, flags, infos); ``compare_ids=False``
    leaves the ids out (two runners with the same seed give equal data under different ids).
    ``model_outputs_tol`` (``rtol``, ``atol``) compares the float leaves of ``extra_model_outputs``
    within that tolerance instead of exactly: for model outputs computed in another process
    (``MODEL_OUTPUTS_TOL``); everything else, what the env emitted included, stays exact."""
    sa, sb = full_state(a), full_state(b)
    if not compare_ids:
        del sa["id_"], sb["id_"]
    assert sa.keys() == sb.keys()
    for key in sa:
        x, y = sa[key], sb[key]
        if key in ("observations", "actions", "rewards"):
            _assert_struct_equal(x, y, key)
        elif key == "extra_model_outputs":
            assert x.keys() == y.keys()
            for k in x:
                _assert_struct_equal(x[k], y[k], f"extra_model_outputs[{k!r}]", model_outputs_tol)
        else:
            assert x == y, key


def _assert_struct_equal(x: Any, y: Any, where: str, float_tol: dict[str, float] | None = None) -> None:
    assert tree.spec_of(x) == tree.spec_of(y), where
    for lx, ly in zip(tree.flatten(x), tree.flatten(y), strict=True):
        assert lx.dtype == ly.dtype, f"{where}: {lx.dtype} != {ly.dtype}"
        if float_tol is not None and lx.dtype.kind == "f":
            np.testing.assert_allclose(lx, ly, **float_tol, err_msg=where)
        else:
            np.testing.assert_array_equal(lx, ly, err_msg=where)


def cpus_back_to(expected: float, *, timeout_s: float = 10.0) -> bool:
    """Whether Ray's available CPUs come back to ``expected`` within ``timeout_s`` (placement
    groups and actors give theirs back asynchronously)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) == expected:
            return True
        time.sleep(0.05)
    return False


def idle_cpus(*, timeout_s: float = 10.0) -> float:
    """The cluster's CPUs once none is held (an earlier test's actors and placement groups give
    theirs back asynchronously); the starting point of a test that counts CPUs."""
    import ray

    total = ray.cluster_resources().get("CPU", 0.0)
    assert cpus_back_to(total, timeout_s=timeout_s), f"CPUs still held after {timeout_s} s"
    return total


def kill_and_wait(actor: Any, *, timeout_s: float = 30.0) -> None:
    """Kills ``actor`` and returns once it is dead: ``ray.kill`` returns before, and a call made at
    once may still be answered by the old process (a test that expects a restart would then see none)."""
    import ray

    ray.kill(actor)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.01)
    raise AssertionError(f"the actor did not die within {timeout_s} s")


def greedy_return(policy: Any, env_id: str = "CartPole-v1", *, episodes: int = 5, seed: int = 0) -> float:
    """The mean return of ``policy`` (a ``ray_sampler.policy.Policy``) acting greedily, in this process,
    over ``episodes`` episodes of ``env_id`` seeded ``seed``, ``seed + 1``, ... (CartPole-v1: a greedy
    policy that learned nothing pushes one way and ends near 10; uniform random play averages 22)."""
    env = gym.make(env_id)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        state, done = None, False
        while not done:
            action, state = policy.compute_single_action(obs, state)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes
