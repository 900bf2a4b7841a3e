"""Atari ids: the preprocessed ``ray_sampler/<Game>-v5`` envs in both vectorization modes, through a
local EnvRunner with the CNN module, and the one-line error where ale-py is missing."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler import EnvRunner, EnvRunnerConfig, VectorizationMode
from ray_sampler.envs import atari_env
from ray_sampler.envs.atari import make_atari_env, make_atari_vector_env
from ray_sampler.errors import EnvCreatorError
from ray_sampler.modules.torch_cnn import TorchCNNModule
from ray_sampler.sampling.env_creator import resolve_creator, sub_env_seeds

PONG = "ray_sampler/Pong-v5"
FRAMES = gym.spaces.Box(0, 255, (84, 84), np.uint8)
MODES = list(VectorizationMode)


def pong_runner(mode: VectorizationMode, *, columnar: bool = True, **kwargs: object) -> EnvRunner:
    config = EnvRunnerConfig(
        env=PONG,
        vectorization_mode=mode,
        num_envs_per_env_runner=2,
        rollout_fragment_length=100,
        module_class=TorchCNNModule,
        columnar_sampling=columnar,
        **kwargs,  # type: ignore[arg-type]
    )
    return EnvRunner(config)


class TestIds:
    def test_atari_env_names_the_preprocessed_id(self) -> None:
        assert atari_env("ALE/Pong-v5") == PONG
        assert atari_env("ALE/Breakout-v5") == "ray_sampler/Breakout-v5"

    def test_atari_env_refuses_an_id_that_is_not_an_ale_v5_game(self) -> None:
        with pytest.raises(EnvCreatorError, match=r"^atari_env: 'ale_id' must be an ALE v5 id such as 'ALE/Pong-v5' "):
            atari_env("ALE/Pong-v4")

    def test_missing_ale_py_gives_the_install_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "ale_py", None)  # find_spec("ale_py") is None: as if not installed
        with pytest.raises(EnvCreatorError) as info:
            atari_env("ALE/Pong-v5")
        assert str(info.value) == (
            "atari_env('ALE/Pong-v5') needs ale-py and opencv, which are not installed: "
            'pip install "ray-sampler[atari]"'
        )

    def test_an_unknown_atari_id_without_ale_py_names_the_install_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "ale_py", None)
        with pytest.raises(EnvCreatorError, match=r'Atari id, which needs ale-py and opencv: pip install "ray-sampler'):
            resolve_creator("ray_sampler/NoSuchGame-v5")


class TestPreprocessing:
    def test_both_modes_have_one_84x84_uint8_frame_and_the_minimal_actions(self) -> None:
        single = gym.make(PONG)
        vector = gym.make_vec(PONG, num_envs=2, vectorization_mode="vector_entry_point")
        assert single.observation_space == vector.single_observation_space == FRAMES
        assert single.action_space == vector.single_action_space == gym.spaces.Discrete(6)
        single.close()
        vector.close()

    def test_both_modes_skip_4_frames_per_step(self) -> None:
        single = make_atari_env(game="pong")
        _, info = single.reset(seed=1)
        start = info["episode_frame_number"]
        frames = [single.step(0)[4]["episode_frame_number"] - start for _ in range(3)]
        vector = make_atari_vector_env(game="pong", num_envs=2)
        _, vinfo = vector.reset(seed=1)
        vframes = [vector.step(np.zeros(2, np.int64))[4]["episode_frame_number"] - vinfo["episode_frame_number"]]
        assert frames == [4, 8, 12]
        assert vframes[0].tolist() == [4, 4]

    def test_native_observations_are_single_frames(self) -> None:
        vector = make_atari_vector_env(game="pong", num_envs=3)
        obs, _ = vector.reset(seed=0)
        next_obs, *_ = vector.step(np.zeros(3, np.int64))
        assert (obs.shape, obs.dtype, next_obs.shape) == ((3, 84, 84), np.uint8, (3, 84, 84))

    @pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
    def test_max_episode_steps_truncates_after_that_many_steps(self, mode: VectorizationMode) -> None:
        runner = pong_runner(mode, max_episode_steps=30, batch_mode="complete_episodes")
        episodes = runner.sample(num_episodes=2)
        assert [(len(ep), ep.is_truncated, ep.is_terminated) for ep in episodes] == [(30, True, False)] * 2


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
class TestPongThroughARunner:
    """A few hundred Pong steps through a local EnvRunner with TorchCNNModule, in each vectorization mode."""

    @pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
    def test_each_step_stores_one_uint8_84x84_frame_and_a_float64_reward(
        self, mode: VectorizationMode, columnar: bool
    ) -> None:
        episodes = pong_runner(mode, columnar=columnar).sample()
        assert [len(ep) for ep in episodes] == [100, 100]  # 2 sub-envs x rollout_fragment_length
        for ep in episodes:
            obs = np.asarray(ep.get_observations())
            rewards = np.asarray(ep.get_rewards())
            assert (obs.shape, obs.dtype) == ((101, 84, 84), np.uint8)
            assert (rewards.shape, rewards.dtype) == ((100,), np.float64)

    def test_columnar_sample_keeps_frames_uint8(self, mode: VectorizationMode) -> None:
        col, metrics = pong_runner(mode).sample_columnar(num_timesteps=300)
        assert col is not None
        assert (col.data.observations.dtype, col.data.observations.shape[1:]) == (np.uint8, (84, 84))
        assert col.data.rewards.dtype == np.float64
        assert metrics.num_env_steps == 300

    def test_seed_0_starts_each_sub_env_from_its_derived_seed(self, mode: VectorizationMode) -> None:
        episodes = pong_runner(mode, seed=0).sample(num_timesteps=20)
        seeds = sub_env_seeds(0, 0, 2)
        assert seeds is not None
        if mode is VectorizationMode.SYNC:
            firsts = [make_atari_env(game="pong").reset(seed=s)[0] for s in seeds]
        else:  # a native vector env takes one seed (the first) and seeds its sub-envs s, s + 1
            firsts = list(make_atari_vector_env(game="pong", num_envs=2).reset(seed=seeds[0])[0])
        for ep, first in zip(episodes, firsts, strict=True):
            np.testing.assert_array_equal(ep.get_observations(0), first)

    def test_a_rerun_with_the_same_seed_gives_the_same_frames(self, mode: VectorizationMode) -> None:
        a, b = (pong_runner(mode, seed=5).sample(num_timesteps=40) for _ in range(2))
        for ep_a, ep_b in zip(a, b, strict=True):
            np.testing.assert_array_equal(ep_a.get_observations(), ep_b.get_observations())
            assert ep_a.get_actions().tolist() == ep_b.get_actions().tolist()
