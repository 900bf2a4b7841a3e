"""Golden cases: seeded sampling, replay and learner runs whose exact outputs are pinned.

``python -m tests.golden.cases`` wrote ``golden.npz``; ``tests/test_golden.py`` recomputes every
case and compares every array (exactly, or within a stated tolerance where a float went through a
BLAS kernel or a reduction: its docstring gives the rule). Outputs are read through public names
only (the Arrow table of a sample, the replay's sample dict, the learners' weights), so internal
moves cannot hide a change. The file holds plain arrays (``allow_pickle=False``): loading it runs
no code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from learner import DQNConfig, DQNLearner, Learner, PPOConfig, QModule
from ray_sampler import EnvRunner, EnvRunnerConfig, MLPModule, columnar_to_arrow
from replay import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer
from tests.helpers import stamp_creator

__all__ = ["GOLDEN_PATH", "WeightsAdjust", "compute_all", "learner_cases", "replay_cases", "sampling_cases"]

GOLDEN_PATH = Path(__file__).with_name("golden.npz")

_ENVS = {"cartpole": "CartPole-v1", "stamp": stamp_creator}


def _arrow_arrays(table: pa.Table, prefix: str) -> dict[str, np.ndarray]:
    """Every column of ``table`` as plain arrays (values, then the null mask), and its schema text."""
    out: dict[str, np.ndarray] = {}
    for name in table.column_names:
        arr = table.column(name).combine_chunks()
        out[f"{prefix}/{name}/null"] = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
        if pa.types.is_fixed_size_list(arr.type):
            values = arr.fill_null(pa.scalar([0] * arr.type.list_size, arr.type)).flatten()
        else:
            values = arr
        if pa.types.is_string(values.type):
            out[f"{prefix}/{name}"] = np.array([v if v is not None else "" for v in values.to_pylist()], dtype=str)
        else:
            dtype = np.dtype(values.type.to_pandas_dtype())
            out[f"{prefix}/{name}"] = np.array(
                [v if v is not None else dtype.type(0) for v in values.to_pylist()], dtype
            )
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fields = {f.name: {k.decode(): v.decode() for k, v in (f.metadata or {}).items()} for f in table.schema}
    out[f"{prefix}/schema"] = np.array(json.dumps({"meta": meta, "fields": fields}, sort_keys=True))
    return out


# Changes a runner module's weights (``get_state()["module"]`` -> the weights to load): the golden
# tests' own checks use it to show what the comparison catches and what it must not be sensitive to.
WeightsAdjust = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def _runner(
    env: str, batch_mode: str, columnar: bool, lookback: int, seed: int = 3, adjust: WeightsAdjust | None = None
) -> EnvRunner:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=_ENVS[env],
            num_envs_per_env_runner=4,
            rollout_fragment_length=13,
            batch_mode=batch_mode,
            episode_lookback_horizon=lookback,
            columnar_sampling=columnar,
            seed=seed,
        ),
        worker_index=1,
        num_workers=2,
    )
    if adjust is not None:
        runner.set_state({"module": adjust(runner.get_state()["module"])})
    return runner


def sampling_cases(adjust: WeightsAdjust | None = None) -> dict[str, np.ndarray]:
    """Three seeded ``sample_columnar()`` calls per engine, batch mode, lookback and env (with the
    runners' weights changed by ``adjust`` where given)."""
    out: dict[str, np.ndarray] = {}
    for env in _ENVS:
        for batch_mode in ("truncate_episodes", "complete_episodes"):
            for columnar in (True, False):
                for lookback in (1, 4):
                    runner = _runner(env, batch_mode, columnar, lookback, adjust=adjust)
                    for call in range(3):
                        col, _ = runner.sample_columnar()
                        key = f"sample/{env}/{batch_mode}/{'vectorized' if columnar else 'per_step'}/h{lookback}/{call}"
                        out.update(_arrow_arrays(columnar_to_arrow(col), key))
    return out


def _filled_replay(buffer: EpisodeReplayBuffer) -> EpisodeReplayBuffer:
    runner = _runner("cartpole", "truncate_episodes", True, 2, seed=5)
    for _ in range(6):
        buffer.add(runner.sample_columnar()[0])
    return buffer


def replay_cases() -> dict[str, np.ndarray]:
    """Seeded uniform and prioritized draws with n_step 3, over chunks that continue each other."""
    out: dict[str, np.ndarray] = {}
    uniform = _filled_replay(EpisodeReplayBuffer(capacity_env_steps=250, seed=7))
    for k, v in uniform.sample(64, n_step=3, gamma=0.9, include_extra_model_outputs=True).items():
        out[f"replay/uniform/{k}"] = np.asarray(v)
    prio = _filled_replay(PrioritizedEpisodeReplayBuffer(capacity_env_steps=250, seed=7, alpha=0.7, beta=0.5))
    first = prio.sample(32, n_step=3, gamma=0.9)
    prio.update_priorities(first["keys"], np.arange(32, dtype=np.float64))
    for k, v in prio.sample(64, n_step=3, gamma=0.9, include_extra_model_outputs=True).items():
        out[f"replay/prioritized/{k}"] = np.asarray(v)
    return out


def learner_cases() -> dict[str, np.ndarray]:
    """One PPO update on a fixed sample and one DQN update on a fixed replay batch."""
    out: dict[str, np.ndarray] = {}
    runner = _runner("cartpole", "truncate_episodes", True, 1, seed=11)
    episodes = runner.sample()
    config = PPOConfig(num_epochs=2, lr=1e-3, minibatch_size=256)  # the pinned update's own, not the defaults
    ppo = Learner(MLPModule(runner.observation_space, runner.action_space, seed=0), config)
    metrics = ppo.update_from_episodes(episodes)
    for k, v in ppo.module.get_state().items():
        out[f"ppo/weights/{k}"] = np.asarray(v)
    for k in ("policy_loss", "vf_loss", "entropy", "kl"):
        if k in metrics:
            out[f"ppo/metrics/{k}"] = np.asarray(metrics[k])
    buffer = _filled_replay(EpisodeReplayBuffer(capacity_env_steps=250, seed=7))
    batch = buffer.sample(64, n_step=3, gamma=0.99)
    dqn = DQNLearner(QModule(runner.observation_space, runner.action_space, seed=0), DQNConfig(lr=1e-3))
    result = dqn.update_from_batch(batch)
    for k, v in dqn.module.get_state().items():
        out[f"dqn/weights/{k}"] = np.asarray(v)
    out["dqn/td_errors"] = np.asarray(result["td_errors"])
    out["dqn/loss"] = np.asarray(result["loss"])
    return out


def compute_all() -> dict[str, np.ndarray]:
    """Every golden array, keyed by case."""
    return {**sampling_cases(), **replay_cases(), **learner_cases()}


def _write() -> None:
    arrays: dict[str, Any] = compute_all()
    np.savez_compressed(GOLDEN_PATH, **arrays)
    print(f"wrote {len(arrays)} arrays to {GOLDEN_PATH}")


if __name__ == "__main__":
    _write()
