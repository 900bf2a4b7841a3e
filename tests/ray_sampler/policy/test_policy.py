"""Policy: the same actions as the runner it was built from, saved and loaded with no Ray, refused
when its files changed or it is asked the wrong thing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors.common import MeanStdFilter
from connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from connectors.env_to_module.prev_actions_prev_rewards import PrevActionsPrevRewardsEnvToModule
from ray_sampler.modules import MLPModule
from ray_sampler.policy import MultiAgentPolicy, Policy, PolicyError, load_policy
from ray_sampler.policy.space_spec import space_from_json, space_to_json
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.runner_build import build_policy
from tests.ray_sampler.data.catalogue import SPACE


def _runner(env: str, pieces: tuple[Any, ...] = (), **kwargs: Any) -> EnvRunner:
    config = EnvRunnerConfig(
        env=env, num_envs_per_env_runner=2, batch_mode=BatchMode.COMPLETE_EPISODES, rollout_fragment_length=40,
        env_to_module_connectors=pieces, seed=3, **kwargs,
    )  # fmt: skip
    return EnvRunner(config)


def _policy_of(runner: EnvRunner) -> Policy:
    return build_policy(
        runner.config, runner.observation_space, runner.action_space,
        weights=runner.module.get_state(), connector_state=runner.env_to_module.get_state(),
    )  # fmt: skip


def _torch_lstm() -> dict[str, Any]:
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    return {"module_class": TorchLSTMModule, "module_config": {"lstm_cell_size": 16, "seed": 1}}


CASES = {
    "mlp": ("CartPole-v1", (), {}),
    "frame-stack-and-filter": ("CartPole-v1", (FrameStackingEnvToModule(num_frames=3), MeanStdFilter()), {}),
    "prev-actions-and-rewards": ("CartPole-v1", (PrevActionsPrevRewardsEnvToModule(n_prev_actions=2),), {}),
    "box-actions-filter": ("Pendulum-v1", (MeanStdFilter(),), {}),
    "torch-lstm": ("StatelessCartPole-v1", (), "lstm"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_saved_policy_acts_as_its_runner_did_on_recorded_episodes(case: str, tmp_path: Path) -> None:
    env, pieces, extra = CASES[case]
    runner = _runner(env, pieces, **(_torch_lstm() if extra == "lstm" else {}))
    runner.sample()  # explores: the filter learns moments, so the policy must carry them
    episodes = runner.sample(num_episodes=2, explore=False, force_reset=True)  # greedy, the filter frozen
    policy = load_policy(_policy_of(runner).save(tmp_path / "policy"))
    assert isinstance(policy, Policy)
    for episode in episodes:
        obs, actions = episode.get_observations(slice(0, len(episode))), episode.get_actions(slice(0, len(episode)))
        rewards, state = episode.get_rewards(slice(0, len(episode))), None
        chosen = []
        for t in range(len(episode)):
            _, state = policy.compute_single_action(obs[t], state, reward=rewards[t - 1] if t else 0.0)
            chosen.append(state.action)
        if isinstance(runner.action_space, gym.spaces.Discrete):
            assert [int(a) for a in chosen] == [int(a) for a in actions]
        else:  # the Gaussian's mean: the same numpy code in this process, to float32 precision
            np.testing.assert_allclose(np.array(chosen), np.array(actions), rtol=1e-5, atol=1e-6)
    first = np.stack([ep.get_observations(0) for ep in episodes])
    batch_actions = policy.compute_actions(first)  # each row an episode's first step
    expected = np.stack([ep.get_actions(0) for ep in episodes])
    if isinstance(runner.action_space, gym.spaces.Box):
        expected = np.clip(expected, runner.action_space.low, runner.action_space.high)
    np.testing.assert_allclose(np.asarray(batch_actions, np.float64), expected.astype(np.float64), atol=1e-6)


def test_a_long_episode_keeps_its_history_across_the_trim(tmp_path: Path) -> None:
    stack = FrameStackingEnvToModule(num_frames=4)
    policy = build_policy(EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=(stack,)), *_cartpole())
    obs = np.arange(4 * 300, dtype=np.float32).reshape(300, 4) / 1000
    state, seen = None, []
    for t in range(300):
        _, state = policy.compute_single_action(obs[t], state)
        seen.append(state.episode.get_observations(slice(-4, None), fill=0.0))
    assert len(state.episode) < 300  # cut back to its lookback, not kept whole
    np.testing.assert_array_equal(np.asarray(seen[-1]), obs[-4:])
    np.testing.assert_array_equal(np.asarray(seen[260]), obs[257:261])


def _cartpole() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def test_observations_of_the_wrong_shape_are_one_line() -> None:
    policy = build_policy(EnvRunnerConfig(env="CartPole-v1"), *_cartpole())
    with pytest.raises(
        PolicyError, match=r"compute_actions: 'obs': a batch \[N, 4\] of Box.* allowed \(got shape \[3, 5\]\)"
    ):
        policy.compute_actions(np.zeros((3, 5), np.float32))
    with pytest.raises(PolicyError, match=r"compute_single_action: 'obs': a batch \[N, 4\].*\(got shape \[1\]\)"):
        policy.compute_single_action(0.5)
    with pytest.raises(PolicyError, match=r"compute_actions: 'obs': numbers of Box.* allowed \(got an array of <U"):
        policy.compute_actions(np.array([["a", "b", "c", "d"]]))
    with pytest.raises(PolicyError, match="'state' must be the PolicyState it returned"):
        policy.compute_single_action(np.zeros(4, np.float32), {"h": 1})  # type: ignore[arg-type]


def test_a_changed_or_missing_file_is_refused(tmp_path: Path) -> None:
    folder = build_policy(EnvRunnerConfig(env="CartPole-v1"), *_cartpole()).save(tmp_path / "p")
    data = bytearray((folder / "policy.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (folder / "policy.npz").write_bytes(bytes(data))
    with pytest.raises(PolicyError, match=r"is corrupt: policy.npz is missing or does not match its hash"):
        Policy.from_checkpoint(folder)
    meta = json.loads((folder / "policy.json").read_text())
    meta["modules"]["default_policy"]["module_class"] = "os:system"
    (folder / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(PolicyError, match="does not match its own digest"):
        Policy.from_checkpoint(folder)
    with pytest.raises(PolicyError, match=r"no policy at .*: it does not exist"):
        Policy.from_checkpoint(tmp_path / "nothing")
    with pytest.raises(PolicyError, match=r"a policy folder .*, a checkpoint or a run directory"):
        Policy.from_checkpoint(tmp_path)


class MyModule(MLPModule):
    """A user's module class: not imported because a file names it."""


class NoConfigPiece(MeanStdFilter):
    get_config = None  # type: ignore[assignment]


def test_a_users_class_is_taken_only_from_classes(tmp_path: Path) -> None:
    folder = build_policy(EnvRunnerConfig(env="CartPole-v1", module_class=MyModule), *_cartpole()).save(tmp_path / "p")
    name = f"{MyModule.__module__}:MyModule"
    with pytest.raises(PolicyError, match=f"built with {name}, which is not ray-sampler's: pass classes="):
        Policy.from_checkpoint(folder)
    assert type(Policy.from_checkpoint(folder, classes={name: MyModule}).module) is MyModule
    piece = build_policy(EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=(NoConfigPiece(),)), *_cartpole())
    with pytest.raises(PolicyError, match=r"NoConfigPiece has no get_config\(\)"):
        piece.save(tmp_path / "q")
    assert not (tmp_path / "q").exists()


def test_a_run_directory_gives_its_final_policy_else_its_newest_checkpoints(tmp_path: Path) -> None:
    config = EnvRunnerConfig(env="CartPole-v1")
    for i in (1, 2):
        build_policy(config, *_cartpole(), info={"iteration": i}).save(
            tmp_path / "checkpoints" / f"ckpt-000000{i}" / "policy"
        )
    assert Policy.from_checkpoint(tmp_path).info == {"iteration": 2}
    assert Policy.from_checkpoint(tmp_path / "checkpoints" / "ckpt-0000001").info == {"iteration": 1}
    build_policy(config, *_cartpole(), info={"iteration": 3}).save(tmp_path / "policy")
    assert Policy.from_checkpoint(tmp_path).info == {"iteration": 3}


def test_a_multi_agent_policy_maps_agents_to_their_modules(tmp_path: Path) -> None:
    obs_space, act_space = _cartpole()
    left = build_policy(EnvRunnerConfig(env="CartPole-v1", module_config={"seed": 1}), obs_space, act_space)
    right = build_policy(EnvRunnerConfig(env="CartPole-v1", module_config={"seed": 2}), obs_space, act_space)
    saved = MultiAgentPolicy({"left": left, "right": right}, {0: "left", 1: "right", "x": "right"}).save(tmp_path / "p")
    with pytest.raises(PolicyError, match=r"is multi-agent .*MultiAgentPolicy.from_checkpoint"):
        Policy.from_checkpoint(saved)
    policy = load_policy(saved)
    assert isinstance(policy, MultiAgentPolicy) and policy.mapping == {0: "left", 1: "right", "x": "right"}
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    actions = policy.compute_actions({0: obs[0], 1: obs[1], "x": obs[2]})
    expected = [left.compute_actions(obs[:1]), right.compute_actions(obs[1:2]), right.compute_actions(obs[2:])]
    assert actions == {0: expected[0][0], 1: expected[1][0], "x": expected[2][0]}
    with pytest.raises(PolicyError, match=r"agent 7 is not in the policy's mapping \(agents: \[0, 1, 'x'\]\)"):
        policy.compute_actions({7: obs[0]})
    with pytest.raises(PolicyError, match=r"names modules \['nope'\] that are not among the policies"):
        MultiAgentPolicy({"left": left}, {0: "nope"})


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1.0, 2.0, (2, 3), np.float32),
        gym.spaces.Box(np.array([0, -5]), np.array([3, 5]), dtype=np.int64),
        gym.spaces.Discrete(5, start=-2),
        gym.spaces.MultiDiscrete([[3, 4], [2, 5]], start=[[0, 1], [1, 0]]),
        gym.spaces.MultiBinary([2, 3]),
        SPACE,
    ],
    ids=["box", "int-box", "discrete-start", "multi-discrete-2d", "multi-binary-2d", "catalogue"],
)
def test_spaces_come_back_equal_from_their_json(space: gym.Space) -> None:
    arrays: dict[str, np.ndarray] = {}
    spec = json.loads(json.dumps(space_to_json(space, arrays, "obs")))
    assert space_from_json(spec, arrays) == space


def test_a_space_a_saved_policy_cannot_hold_is_named() -> None:
    with pytest.raises(PolicyError, match=r"policy: obs/seq is a Sequence space"):
        space_to_json(gym.spaces.Dict({"seq": gym.spaces.Sequence(gym.spaces.Discrete(2))}), {}, "obs")


def test_a_file_can_name_no_function_and_no_module_it_imports(tmp_path: Path) -> None:
    """Digests prove nothing against a file crafted whole: the loader takes only classes defined in
    ray-sampler's own modules, so a file naming ``os.system`` (reached through a module that imports
    ``os``) is refused before anything is called."""
    from ray_sampler.data.state_files import content_digest

    filtered = EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=(MeanStdFilter(),))
    folder = build_policy(filtered, *_cartpole()).save(tmp_path / "p")
    for crafted in ("ray_sampler.data.state_files:os.system", "ray_sampler.data.state_files:write_bytes"):
        meta = json.loads((folder / "policy.json").read_text())
        meta["modules"]["default_policy"]["env_to_module"][0] = {"class": crafted, "config": {"command": "true"}}
        meta.pop("sha256")
        meta["sha256"] = content_digest(meta)
        (folder / "policy.json").write_text(json.dumps(meta))
        with pytest.raises(PolicyError, match=f"names '{re.escape(crafted)}', which is no class of ray-sampler's"):
            Policy.from_checkpoint(folder)


def test_a_policy_acting_never_moves_its_filter() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=(MeanStdFilter(),))
    policy = build_policy(config, *_cartpole())
    before = json.dumps(policy.env_to_module.get_state(), default=lambda a: np.asarray(a).tolist())
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    first = policy.compute_actions(obs, explore=False)
    for _ in range(3):
        policy.compute_actions(obs * 10, explore=True)  # a runner's filter would learn from these
    assert json.dumps(policy.env_to_module.get_state(), default=lambda a: np.asarray(a).tolist()) == before
    assert np.array_equal(policy.compute_actions(obs, explore=False), first)
