"""Learner: a real learning signal, state round trips, minibatch plans and PPOConfig's checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learner.learner import Learner, PPOConfig, minibatch_plan
from learner.ppo_loss import ppo_loss_and_grads
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner


def cartpole_runner(seed: int = 0) -> EnvRunner:
    return EnvRunner(
        EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=8, rollout_fragment_length=256, seed=seed)
    )


def test_ppo_learns_cartpole_on_a_seeded_run() -> None:
    runner = cartpole_runner()
    learner = Learner(MLPModule(runner.observation_space, runner.action_space, seed=0), PPOConfig())
    returns = []
    for _ in range(10):
        episodes = runner.sample()
        returns += runner.metrics.episode_returns
        metrics = learner.update_from_episodes(episodes)
        runner.set_state({"module": learner.module.get_state()})
    # A random policy averages about 22 on CartPole-v1; ten PPO updates are far above it.
    assert np.mean(returns[:20]) < 40 < 150 < np.mean(returns[-20:])
    assert metrics.num_gradient_steps == 8 * 16 and metrics.batch_size == 2048  # 8 epochs of 16 minibatches of 128
    assert metrics.weights_version == 10 and metrics.num_learners == 0 and metrics.learner_connector_s > 0


def test_learner_state_round_trip() -> None:
    runner = cartpole_runner()
    spaces = (runner.observation_space, runner.action_space)
    a = Learner(MLPModule(*spaces, seed=0))
    a.update_from_episodes(runner.sample())
    b = Learner(MLPModule(*spaces, seed=1))
    b.set_state(a.get_state())
    episodes = runner.sample()
    a.update_from_episodes(episodes)
    b.update_from_episodes(episodes)
    for k, v in a.module.get_state().items():
        np.testing.assert_array_equal(v, b.module.get_state()[k])


def test_a_state_loaded_with_another_lr_steps_with_the_new_lr() -> None:
    """Population-based training mutates ``lr`` and loads another trial's state: the moments come
    from the state, the step size from the config (the first update's step is lr-sized)."""
    runner = cartpole_runner()
    spaces = (runner.observation_space, runner.action_space)
    a = Learner(MLPModule(*spaces, seed=0), PPOConfig(lr=1e-3))
    a.update_from_episodes(runner.sample())
    episodes = runner.sample()
    steps = {}
    for lr in (1e-3, 4e-3):
        b = Learner(MLPModule(*spaces, seed=1), PPOConfig(lr=lr, num_epochs=1, minibatch_size=2048))
        b.set_state(a.get_state())
        assert b.optimizer.lr == lr and b.optimizer.t == a.optimizer.t
        before = b.module.get_state()
        b.update_from_episodes(episodes)
        steps[lr] = max(float(np.abs(v - before[k]).max()) for k, v in b.module.get_state().items())
    # One Adam step with the same moments and gradients: each parameter moves lr times the same
    # factor, so the largest move scales with lr (float32 arithmetic: 1e-4 relative)
    assert steps[4e-3] == pytest.approx(4 * steps[1e-3], rel=1e-4)


def test_minibatch_plan_covers_every_row_once() -> None:
    plan = minibatch_plan(10, 3, np.random.default_rng(0))
    assert sorted(np.concatenate(plan).tolist()) == list(range(10)) and [len(p) for p in plan] == [3, 3, 4]


def test_bad_ppo_config_raises() -> None:
    with pytest.raises(ConfigError, match="'minibatch_size' must be an int >= 1"):
        PPOConfig(minibatch_size=0)
    with pytest.raises(ConfigError, match="'lambda_' must be in"):
        PPOConfig(lambda_=2.0)


class TestPPOConfigChecks:
    def test_a_bool_is_not_an_int(self) -> None:
        with pytest.raises(ConfigError, match=r"'num_epochs' must be an int >= 1 \(got True\)"):
            PPOConfig(num_epochs=True)

    def test_infinity_is_not_a_learning_rate(self) -> None:
        with pytest.raises(ConfigError, match=r"'lr' must be a finite number > 0 \(got inf\)"):
            PPOConfig(lr=float("inf"))

    def test_a_wrong_type_is_a_config_error_not_a_type_error(self) -> None:
        with pytest.raises(ConfigError, match=r"'lr' must be a finite number > 0 \(got 'x'\)"):
            PPOConfig(lr="x")

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"minibatch_size": True}, r"'minibatch_size' must be an int >= 1 \(got True\)"),
            ({"seed": False}, r"'seed' must be an int >= 0 \(got False\)"),
            ({"clip_param": True}, r"'clip_param' must be a finite number > 0 \(got True\)"),
            ({"standardize_advantages": 1}, r"'standardize_advantages' must be True or False \(got 1\)"),
            ({"gamma": float("nan")}, r"'gamma' must be in \[0, 1\] \(got nan\)"),
            ({"vf_coeff": float("nan")}, r"'vf_coeff' must be a finite number >= 0 \(got nan\)"),
            ({"entropy_coeff": float("-inf")}, r"'entropy_coeff' must be a finite number >= 0 \(got -inf\)"),
            ({"grad_clip": float("inf")}, r"'grad_clip' must be a finite number > 0 or None \(got inf\)"),
            ({"lambda_": "0.9"}, r"'lambda_' must be in \[0, 1\] \(got '0.9'\)"),
            ({"num_epochs": 2.0}, r"'num_epochs' must be an int >= 1 \(got 2.0\)"),
            ({"grad_clip": "big"}, r"'grad_clip' must be a finite number > 0 or None \(got 'big'\)"),
            ({"vf_clip_param": 0.0}, r"'vf_clip_param' must be a finite number > 0 or None \(got 0.0\)"),
        ],
        ids=[
            "bool_int",
            "bool_seed",
            "bool_number",
            "int_bool",
            "nan_gamma",
            "nan_vf",
            "inf_entropy",
            "inf_clip",
            "str_lambda",
            "float_int",
            "str_clip",
            "zero_vf_clip",
        ],
    )
    def test_bools_nan_and_wrong_types_raise_config_error(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            PPOConfig(**kwargs)

    def test_none_turns_gradient_clipping_off(self) -> None:
        assert PPOConfig(grad_clip=None).grad_clip is None


def test_a_learner_refuses_another_algorithm_s_config() -> None:
    from learner.dqn import DQNConfig

    runner = cartpole_runner()
    with pytest.raises(ConfigError, match=r"'config' must be a PPOConfig \(got DQNConfig\)"):
        Learner(MLPModule(runner.observation_space, runner.action_space), DQNConfig())  # type: ignore[arg-type]


class TestGaussianPolicy:
    """PPO on a Box action space (Pendulum-v1): the learned log-std and the actions the loss scores."""

    def pendulum_runner(self, *, normalize_actions: bool = True, initial_log_std: float = 0.0) -> EnvRunner:
        return EnvRunner(
            EnvRunnerConfig(
                env="Pendulum-v1",
                num_envs_per_env_runner=2,
                rollout_fragment_length=64,
                normalize_actions=normalize_actions,
                module_config={"initial_log_std": initial_log_std},
                seed=0,
            )
        )

    def test_an_update_moves_the_log_std_and_the_runner_takes_it(self) -> None:
        runner = self.pendulum_runner()
        learner = Learner(
            MLPModule(runner.observation_space, runner.action_space, seed=0), PPOConfig(minibatch_size=32)
        )
        before = learner.module.get_state()["pi.log_std"]
        learner.update_from_episodes(runner.sample())
        after = learner.module.get_state()["pi.log_std"]
        assert before.tolist() == [0.0] and after.shape == (1,) and after[0] != 0.0
        runner.set_state({"module": learner.module.get_state()})
        assert runner.get_state()["module"]["pi.log_std"].tolist() == after.tolist()

    @pytest.mark.parametrize("normalize_actions", [True, False], ids=["unsquash", "clip"])
    def test_the_batch_keeps_the_sampled_actions_beyond_the_bounds(self, normalize_actions: bool) -> None:
        # std e: many samples fall outside [-1, 1] (unsquash) or [-2, 2] (clip); the env got them fitted,
        # the episodes keep them as sampled, so the runner's logp is the learner's: ratio 1 everywhere.
        runner = self.pendulum_runner(normalize_actions=normalize_actions, initial_log_std=1.0)
        learner = Learner(MLPModule(runner.observation_space, runner.action_space, seed=0, initial_log_std=1.0))
        batch = learner.build_batch(runner.sample())
        bound = 1.0 if normalize_actions else 2.0
        assert (np.abs(batch["actions"]) > bound).mean() > 0.1
        terms, _ = ppo_loss_and_grads(learner.module.params, batch)
        assert terms["mean_kl_approx"] == pytest.approx(0.0, abs=1e-5) and terms["clip_fraction"] == 0.0

    def test_an_empty_minibatch_gives_zero_gradients_of_every_parameter(self) -> None:
        runner = self.pendulum_runner()
        learner = Learner(MLPModule(runner.observation_space, runner.action_space, seed=0))
        rows = learner.set_batch(runner.sample())
        learner.plan_epoch(rows + 1)  # more minibatches than rows: one is empty
        empty = next(j for j in range(rows + 1) if not learner.compute_gradients(j)[2])
        terms, grads, n = learner.compute_gradients(empty)
        assert (terms, n) == ({}, 0) and grads.keys() == learner.module.params.keys()
        assert all(not g.any() for g in grads.values())
