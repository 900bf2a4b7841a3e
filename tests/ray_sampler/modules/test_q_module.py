"""QModule: Q-values of a ReLU MLP, epsilon-greedy exploration, state with epsilon, checks, action
masks, and runners that explore with it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.spaces import flatten_batch
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.action_masking import MASKED_LOGIT
from ray_sampler.modules.mlp import forward
from ray_sampler.modules.q_module import QModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner


def test_q_values_are_a_relu_mlp_of_the_flattened_observations() -> None:
    module = QModule(gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.Discrete(3), hidden_sizes=(5,), seed=1)
    state = module.get_state()
    assert sorted(state) == ["epsilon", "q.0.b", "q.0.w", "q.1.b", "q.1.w"]
    obs = np.arange(8, dtype=np.float32).reshape(2, 2, 2) / 8
    x = obs.reshape(2, 4)
    hidden = np.maximum(x @ state["q.0.w"] + state["q.0.b"], 0.0)
    np.testing.assert_allclose(module.q_values(obs), hidden @ state["q.1.w"] + state["q.1.b"], rtol=1e-6)


def test_q_module_explores_epsilon_greedily() -> None:
    module = QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3, start=1), seed=0, epsilon=0.0)
    obs = {"obs": np.random.default_rng(0).normal(size=(500, 2))}
    greedy = module.q_values(obs["obs"]).argmax(1)
    np.testing.assert_array_equal(module.forward_inference(obs)["actions"], greedy + 1)
    np.testing.assert_array_equal(
        np.exp(module.forward_exploration(obs)["action_dist_inputs"]).round(6), np.eye(3)[greedy]
    )
    module.set_state({**module.get_state(), "epsilon": np.float64(0.3)})
    probs = np.exp(module.forward_exploration(obs)["action_dist_inputs"].astype(np.float64))
    np.testing.assert_allclose(probs, 0.1 + 0.7 * np.eye(3)[greedy], rtol=1e-6)


def test_inference_records_the_same_distribution_as_exploration() -> None:
    module = QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(4), seed=2, epsilon=0.2)
    obs = {"obs": np.random.default_rng(1).normal(size=(10, 2))}
    np.testing.assert_array_equal(
        module.forward_inference(obs)["action_dist_inputs"], module.forward_exploration(obs)["action_dist_inputs"]
    )


def test_q_module_needs_a_discrete_action_space() -> None:
    with pytest.raises(SpaceError, match="needs a Discrete action space"):
        QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (2,)))


def test_q_module_refuses_an_unknown_activation() -> None:
    with pytest.raises(ConfigError, match=r"'activation' must be one of \('tanh', 'relu'\) \(got 'gelu'\)"):
        QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), activation="gelu")


def test_q_module_refuses_epsilon_outside_0_1() -> None:
    with pytest.raises(ConfigError, match="'epsilon' must be in \\[0, 1\\]"):
        QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), epsilon=1.5)
    module = QModule(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="'epsilon' must be in \\[0, 1\\]"):
        module.set_state({**module.get_state(), "epsilon": np.float64(-0.1)})


def test_state_round_trip_carries_weights_and_epsilon() -> None:
    spaces = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
    a, b = QModule(*spaces, seed=0, epsilon=0.25), QModule(*spaces, seed=1)
    b.set_state(a.get_state())
    assert b.epsilon == 0.25
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(a.q_values(obs), b.q_values(obs))


def test_set_state_without_epsilon_keeps_it() -> None:
    module = QModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), epsilon=0.4)
    module.set_state({k: v for k, v in module.get_state().items() if k != "epsilon"})
    assert module.epsilon == 0.4


def test_set_state_refuses_other_keys() -> None:
    module = QModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden_sizes=(4,))
    with pytest.raises(ValueError, match=r"QModule.set_state: keys differ \(got \['q.0.b', 'q.0.w'\]\)"):
        module.set_state({k: v for k, v in module.get_state().items() if k.startswith("q.0.")})


def test_runners_explore_independently_and_log_the_behaviour_policy() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=1,
        rollout_fragment_length=200,
        seed=0,
        module_class=QModule,
        module_config={"epsilon": 1.0},
    )
    actions = []
    for worker_index in (1, 2):
        runner = EnvRunner(config, worker_index=worker_index)
        episodes = runner.sample()
        actions.append(np.concatenate([np.asarray(ep.get_actions()) for ep in episodes]))
        logp = np.concatenate([np.asarray(ep.get_extra_model_outputs("action_logp")) for ep in episodes])
        np.testing.assert_allclose(logp, np.log(0.5), rtol=1e-6)  # epsilon 1: uniform over 2 actions
    assert 0.4 < actions[0].mean() < 0.6 and (actions[0] != actions[1]).mean() > 0.3  # not the same draws


@pytest.mark.parametrize("columnar", [True, False])
def test_a_q_runner_switches_between_exploring_and_not(columnar: bool) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(
            env="CartPole-v1",
            rollout_fragment_length=50,
            seed=0,
            module_class=QModule,
            module_config={"epsilon": 0.5, "hidden_sizes": (8,)},
            columnar_sampling=columnar,
        ),
        worker_index=1,
    )
    for explore in (True, False, True):  # e.g. an evaluation pass between training samples
        episodes = runner.sample(explore=explore)
        assert all(sorted(ep.extra_model_outputs) == ["action_dist_inputs", "action_logp"] for ep in episodes)
    runner.module.set_state({**runner.module.get_state(), "epsilon": np.float64(0.0)})
    greedy = runner.sample(explore=False)
    logp = np.concatenate([np.asarray(ep.get_extra_model_outputs("action_logp")) for ep in greedy])
    np.testing.assert_allclose(logp, 0.0, atol=1e-6)  # greedy actions have probability 1 at epsilon 0


class TestActionMask:
    """Over a Dict observation with an ``action_mask``: Q-values of forbidden actions are
    ``MASKED_LOGIT``, the greedy action is legal and epsilon is spread over the legal actions only."""

    OBS = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "action_mask": gym.spaces.MultiBinary(5)})

    def flat(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(1)
        mask = (rng.random((n, 5)) < 0.4).astype(np.int8)
        mask[np.arange(n), rng.integers(0, 5, n)] = 1
        return flatten_batch(self.OBS, {"observation": rng.uniform(-1, 1, (n, 3)), "action_mask": mask}), mask

    def test_greedy_actions_are_legal_and_masked_q_values_are_the_masked_logit(self) -> None:
        module = QModule(self.OBS, gym.spaces.Discrete(5, start=2), seed=0, epsilon=0.0)
        x, mask = self.flat(300)
        q = module.q_values(x)
        assert np.array_equal(q == MASKED_LOGIT, mask == 0)
        actions = module.forward_inference({"obs": x})["actions"] - 2
        assert mask[np.arange(300), actions].all()
        unmasked = forward(module.params, "q", x, "relu")[0]  # where the plain argmax would break the rules
        assert not mask[np.arange(300), unmasked.argmax(1)].all()

    def test_epsilon_is_spread_over_the_legal_actions_only(self) -> None:
        module = QModule(self.OBS, gym.spaces.Discrete(5), seed=0, epsilon=0.3)
        x, mask = self.flat(300)
        greedy = module.forward_inference({"obs": x})["actions"]
        logits = module.forward_exploration({"obs": x})["action_dist_inputs"]
        assert np.array_equal(logits == MASKED_LOGIT, mask == 0)
        probs = np.exp(logits.astype(np.float64))
        expected = 0.3 * mask / mask.sum(1, keepdims=True) + 0.7 * np.eye(5)[greedy]
        np.testing.assert_allclose(probs, expected, rtol=1e-6)

    def test_a_runner_exploring_with_epsilon_one_keeps_to_the_mask(self) -> None:
        from tests.ray_sampler.modules.masked_env import MaskedPickEnv

        config = EnvRunnerConfig(
            env=MaskedPickEnv, module_class=QModule, module_config={"epsilon": 1.0}, rollout_fragment_length=300, seed=0
        )
        episodes = EnvRunner(config).sample()
        obs = [ep.get_observations(slice(0, len(ep))) for ep in episodes]
        mask = np.concatenate([np.asarray(o["action_mask"]) for o in obs])
        actions = np.concatenate([np.asarray(ep.get_actions(slice(0, len(ep)))) for ep in episodes])
        assert len(actions) == 300 and mask[np.arange(300), actions].all()
