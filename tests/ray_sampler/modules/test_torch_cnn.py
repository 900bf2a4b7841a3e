"""Torch CNN modules: uint8 frames in, converted inside; PPO and Q outputs; unflattened input from the
default env-to-module pipeline; seeded weights; a PPO update on frames; errors naming the field."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from connectors.env_to_module import default_env_to_module
from learner.learner import PPOConfig
from learner.torch_learner import TorchPPOLearner
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.torch_cnn import TorchCNNModule, TorchCNNQModule
from ray_sampler.modules.torch_mlp import Q_VALUES, TorchMLPModule

FRAMES = gym.spaces.Box(0, 255, (84, 84), np.uint8)
STACKED = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTIONS = gym.spaces.Discrete(6)


def frames(n: int, shape: tuple[int, ...] = (84, 84), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


class TestTorchCNNModule:
    def test_outputs_logits_per_action_and_one_value_per_frame(self) -> None:
        out = TorchCNNModule(FRAMES, ACTIONS).forward_exploration({Columns.OBS: frames(5)})
        assert out[Columns.ACTION_DIST_INPUTS].shape == (5, 6)
        assert out[Columns.VF_PREDS].shape == (5,)

    def test_uint8_frames_are_divided_by_255_inside(self) -> None:
        module = TorchCNNModule(FRAMES, ACTIONS)
        x = frames(3)
        from_uint8 = module.forward_train({Columns.OBS: torch.as_tensor(x)})
        from_float = module.forward_train({Columns.OBS: torch.as_tensor(x, dtype=torch.float32)})
        expected = module.encoder.net(torch.as_tensor(x, dtype=torch.float32)[:, None] / 255.0)
        torch.testing.assert_close(module.encoder(torch.as_tensor(x)), expected, rtol=0, atol=0)
        torch.testing.assert_close(from_uint8[Columns.VF_PREDS], from_float[Columns.VF_PREDS], rtol=0, atol=0)

    def test_a_stack_of_frames_takes_num_channels(self) -> None:
        module = TorchCNNModule(FRAMES, ACTIONS, num_channels=4)
        assert module.forward_inference({Columns.OBS: frames(2, (4, 84, 84))})[Columns.VF_PREDS].shape == (2,)
        assert module.encoder.net[0].in_channels == 4
        assert TorchCNNModule(STACKED, ACTIONS).encoder.net[0].in_channels == 4

    def test_nature_layers_and_a_gaussian_head_for_box_actions(self) -> None:
        module = TorchCNNModule(FRAMES, gym.spaces.Box(-1, 1, (3,)), initial_log_std=-0.5)
        shapes = {k: tuple(v.shape) for k, v in module.get_state().items()}
        assert shapes == {
            "log_std": (3,),
            "encoder.net.0.weight": (32, 1, 8, 8),
            "encoder.net.0.bias": (32,),
            "encoder.net.2.weight": (64, 32, 4, 4),
            "encoder.net.2.bias": (64,),
            "encoder.net.4.weight": (64, 64, 3, 3),
            "encoder.net.4.bias": (64,),
            "encoder.net.7.weight": (512, 3136),
            "encoder.net.7.bias": (512,),
            "pi.weight": (3, 512),
            "pi.bias": (3,),
            "vf.weight": (1, 512),
            "vf.bias": (1,),
        }
        dist = module.forward_exploration({Columns.OBS: frames(2)})[Columns.ACTION_DIST_INPUTS]
        assert dist.shape == (2, 6)
        assert dist[:, 3:].tolist() == [[-0.5] * 3] * 2

    def test_a_seed_gives_the_same_weights_and_leaves_torchs_generator_alone(self) -> None:
        before = torch.random.get_rng_state()
        a, b = TorchCNNModule(FRAMES, ACTIONS, seed=3), TorchCNNModule(FRAMES, ACTIONS, seed=3)
        assert torch.equal(torch.random.get_rng_state(), before)
        for (ka, va), (kb, vb) in zip(a.get_state().items(), b.get_state().items(), strict=True):
            assert ka == kb
            np.testing.assert_array_equal(va, vb)

    def test_the_default_pipeline_hands_it_frames_unflattened(self) -> None:
        pipeline = default_env_to_module(FRAMES)
        x = frames(2)
        kwargs = {"batch": {}, "episodes": [], "shared_data": {"vector_obs": x}}
        cnn_batch = pipeline(rl_module=TorchCNNModule(FRAMES, ACTIONS), **kwargs)
        assert cnn_batch[Columns.OBS] is x
        mlp_batch = pipeline(
            rl_module=TorchMLPModule(FRAMES, ACTIONS), batch={}, episodes=[], shared_data={"vector_obs": x}
        )
        assert (mlp_batch[Columns.OBS].dtype, mlp_batch[Columns.OBS].shape) == (np.float32, (2, 7056))

    def test_a_ppo_update_trains_it_on_uint8_frames(self) -> None:
        module = TorchCNNModule(FRAMES, ACTIONS, seed=0)
        obs = frames(9)
        ep = SingleAgentEpisode(
            observations=list(obs),
            actions=[1, 2, 3, 0, 1, 2, 3, 4],
            rewards=[0.0, 1.0, 0.0, -1.0, 0.0, 0.0, 1.0, 0.0],
            terminated=True,
            extra_model_outputs={
                Columns.ACTION_LOGP: [-1.8] * 8,
                Columns.ACTION_DIST_INPUTS: [np.zeros(6, np.float32)] * 8,
                Columns.VF_PREDS: [0.0] * 8,
            },
        )
        learner = TorchPPOLearner(module, PPOConfig(num_epochs=1, minibatch_size=8))
        batch = learner.build_batch([ep])
        assert (batch[Columns.OBS].dtype, batch[Columns.OBS].shape) == (np.uint8, (8, 84, 84))
        before = module.get_state()["pi.weight"].copy()
        learner.update_from_batch(batch)
        assert not np.array_equal(module.get_state()["pi.weight"], before)


class TestTorchCNNQModule:
    def test_q_values_per_action_and_greedy_inference(self) -> None:
        module = TorchCNNQModule(FRAMES, ACTIONS, epsilon=0.0)
        x = frames(4)
        q = module.forward_train({Columns.OBS: torch.as_tensor(x)})[Q_VALUES]
        assert q.shape == (4, 6)
        greedy = module.forward_inference({Columns.OBS: x})[Columns.ACTIONS]
        assert greedy.tolist() == q.argmax(dim=1).tolist()

    def test_epsilon_travels_with_the_weights(self) -> None:
        a, b = TorchCNNQModule(FRAMES, ACTIONS, epsilon=0.3, seed=1), TorchCNNQModule(FRAMES, ACTIONS, seed=2)
        b.set_state(a.get_state())
        assert b.epsilon == 0.3
        np.testing.assert_array_equal(b.get_state()["q_head.weight"], a.get_state()["q_head.weight"])

    def test_it_takes_frames_unflattened(self) -> None:
        assert TorchCNNQModule.needs_flat_observations is False


class TestErrors:
    def test_a_flat_observation_space_is_refused(self) -> None:
        with pytest.raises(SpaceError, match=r"^TorchCNNModule needs a Box observation space of frames \(H, W\) or"):
            TorchCNNModule(gym.spaces.Box(-1, 1, (4,)), ACTIONS)

    def test_num_channels_must_be_a_positive_int(self) -> None:
        with pytest.raises(ConfigError, match=r"^'num_channels' must be an int >= 1 or None \(got 0\)$"):
            TorchCNNModule(FRAMES, ACTIONS, num_channels=0)

    def test_conv_filters_that_shrink_frames_to_nothing_are_refused(self) -> None:
        with pytest.raises(
            ConfigError, match=r"^'conv_filters' \(\(32, 90, 1\),\) shrink frames of \(84, 84\) to nothing"
        ):
            TorchCNNModule(FRAMES, ACTIONS, conv_filters=((32, 90, 1),))

    def test_the_q_module_needs_discrete_actions(self) -> None:
        with pytest.raises(SpaceError, match=r"^TorchCNNQModule needs a Discrete action space \(got Box"):
            TorchCNNQModule(FRAMES, gym.spaces.Box(-1, 1, (2,)))
