"""Action masking: where a space's mask lies in the flat input; the random players, the torch module
and the default modules never pick a forbidden action (in a runner too); bad spaces are refused in
one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.data.spaces import flatten_batch
from ray_sampler.errors import SpaceError
from ray_sampler.modules import RandomModule
from ray_sampler.modules.action_masking import (
    MASKED_LOGIT,
    MaskedRandomModule,
    action_mask_slice,
    legal_actions,
    mask_logits,
)
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.modules.masked_env import MaskedPickEnv

OBS = gym.spaces.Dict(
    {"observation": gym.spaces.Box(0, 1, (3, 3, 2), np.int8), "action_mask": gym.spaces.MultiBinary(9)}
)
ACT = gym.spaces.Discrete(9)


def masks(n: int, seed: int = 0) -> np.ndarray:
    """``n`` random masks with at least one allowed action each."""
    rng = np.random.default_rng(seed)
    m = (rng.random((n, 9)) < 0.3).astype(np.int8)
    m[np.arange(n), rng.integers(0, 9, n)] = 1
    return m


def batch(mask: np.ndarray) -> dict:
    return {Columns.OBS: {"observation": np.zeros((len(mask), 3, 3, 2), np.int8), "action_mask": mask}}


@pytest.mark.parametrize("module", [MaskedRandomModule(OBS, ACT, seed=1), RandomModule(OBS, ACT, seed=1)])
def test_random_players_draw_only_allowed_actions_and_all_of_them(module: object) -> None:
    mask = masks(2000)
    actions = module.forward_inference(batch(mask))[Columns.ACTIONS]  # type: ignore[attr-defined]
    assert mask[np.arange(len(mask)), actions].all()
    full = np.ones((500, 9), np.int8)  # nothing forbidden: every action comes up
    drawn = module.forward_inference(batch(full))[Columns.ACTIONS]  # type: ignore[attr-defined]
    assert set(drawn.tolist()) == set(range(9))


def test_masked_random_logits_forbid_what_the_mask_forbids() -> None:
    mask = masks(5)
    logits = MaskedRandomModule(OBS, ACT).forward_exploration(batch(mask))[Columns.ACTION_DIST_INPUTS]
    assert np.array_equal(logits == MASKED_LOGIT, mask == 0) and np.all(logits[mask == 1] == 0)


def test_bad_spaces_are_refused() -> None:
    with pytest.raises(SpaceError, match="MaskedRandomModule takes a Discrete action space"):
        MaskedRandomModule(OBS, gym.spaces.Box(0, 1, (9,)))
    with pytest.raises(SpaceError, match="keys 'observation' and 'action_mask'"):
        MaskedRandomModule(gym.spaces.Box(0, 1, (9,)), ACT)
    with pytest.raises(SpaceError, match="'action_mask' has 9 entries for 4 actions"):
        MaskedRandomModule(OBS, gym.spaces.Discrete(4))


def test_the_torch_lstm_masks_acting_and_training() -> None:
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    module = TorchLSTMModule(OBS, ACT, seed=0)
    mask = masks(64)
    flat = flatten_batch(OBS, batch(mask)[Columns.OBS]).astype(np.float32)
    state = {k: np.repeat(v[None], 64, axis=0) for k, v in module.get_initial_state().items()}
    out = module.forward_exploration({Columns.OBS: flat, Columns.STATE_IN: state})
    logits = np.asarray(out[Columns.ACTION_DIST_INPUTS])
    assert np.all((logits == MASKED_LOGIT) == (mask == 0))  # the forbidden actions, and only they (the runner samples)
    # Training on [B, T] sequences masks each step by its own observation.
    seq = flat.reshape(8, 8, -1)
    state_b = {k: v[:8] for k, v in state.items()}
    train = module.forward_train(module._tensors({Columns.OBS: seq, Columns.STATE_IN: state_b}))  # noqa: SLF001  # as the learner's
    train_logits = train[Columns.ACTION_DIST_INPUTS].detach().numpy()
    assert np.all((train_logits == MASKED_LOGIT) == (mask.reshape(8, 8, 9) == 0))


def test_the_torch_module_masks_acting_and_the_loss() -> None:
    import torch

    from learner.learner import PPOConfig
    from learner.torch_learner import ppo_loss
    from ray_sampler.modules.torch_action_masking import TorchActionMaskingModule
    from ray_sampler.modules.torch_module import to_tensor

    module = TorchActionMaskingModule(OBS, ACT, seed=0)
    mask = masks(64)
    out = module.forward_exploration(batch(mask))
    assert np.array_equal(np.asarray(out[Columns.ACTION_DIST_INPUTS]) == MASKED_LOGIT, mask == 0)
    legal = np.array([np.flatnonzero(m)[0] for m in mask])
    train = {**batch(mask), Columns.ACTIONS: legal, Columns.ACTION_LOGP: np.full(64, -1.0, np.float32),
             Columns.ADVANTAGES: np.ones(64, np.float32), Columns.VALUE_TARGETS: np.zeros(64, np.float32)}  # fmt: skip
    terms, total = ppo_loss(module, to_tensor(train), PPOConfig())
    assert all(np.isfinite(v) for v in terms.values()) and torch.isfinite(total)
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


class TestActionMaskSlice:
    def test_the_mask_is_where_the_flattened_dict_holds_it(self) -> None:
        assert action_mask_slice(OBS, ACT) == slice(0, 9)  # the Dict sorts its keys: "action_mask" first
        later = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "action_mask": gym.spaces.Box(0, 1, (4,)), "z": OBS})
        assert action_mask_slice(later, gym.spaces.Discrete(4)) == slice(3, 7)
        flat = flatten_batch(OBS, batch(masks(5))[Columns.OBS])
        assert np.array_equal(legal_actions(flat, slice(0, 9)), masks(5) > 0)

    @pytest.mark.parametrize(
        "spaces",
        [
            (OBS["observation"], ACT),
            (gym.spaces.Dict({"observation": OBS["observation"]}), ACT),
            (OBS, gym.spaces.Box(0, 1, (9,))),
        ],
        ids=["box", "dict-without-mask", "box-actions"],
    )
    def test_spaces_without_a_mask_over_discrete_actions_have_none(self, spaces: tuple) -> None:
        assert action_mask_slice(*spaces) is None

    def test_a_mask_of_the_wrong_size_or_kind_is_refused(self) -> None:
        with pytest.raises(SpaceError, match=r"^'action_mask' must be a Box or MultiBinary of 4 entries"):
            action_mask_slice(OBS, gym.spaces.Discrete(4))
        discrete = gym.spaces.Dict({"action_mask": gym.spaces.Discrete(9)})
        with pytest.raises(SpaceError, match=r"one per action \(got Discrete\(9\)\)"):
            action_mask_slice(discrete, ACT)

    def test_mask_logits_forbids_only_the_masked_entries(self) -> None:
        logits = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = mask_logits(logits, np.array([[True, False, True], [False, False, True]]))
        assert out.dtype == np.float32
        assert out.tolist() == [[0.0, MASKED_LOGIT, 2.0], [MASKED_LOGIT, MASKED_LOGIT, 5.0]]


def test_the_random_module_keeps_to_the_mask_of_flattened_observations() -> None:
    mask = masks(2000)
    flat = flatten_batch(OBS, batch(mask)[Columns.OBS])
    actions = RandomModule(OBS, ACT, seed=1).forward_inference({Columns.OBS: flat})[Columns.ACTIONS]
    assert mask[np.arange(len(mask)), actions].all() and set(actions.tolist()) == set(range(9))


def _moves(episode: object) -> tuple[np.ndarray, np.ndarray]:
    """(masks [T, n], actions [T]) of a single-agent episode chunk's steps."""
    n = len(episode)  # type: ignore[arg-type]
    obs = episode.get_observations(slice(0, n))  # type: ignore[attr-defined]
    mask = np.array([o["action_mask"] for o in obs]) if isinstance(obs, list) else np.asarray(obs["action_mask"])
    return mask.reshape(n, -1), np.asarray(episode.get_actions(slice(0, n)), np.int64)  # type: ignore[attr-defined]


@pytest.mark.parametrize("framework", ["numpy", "torch", "torch-lstm"])
def test_the_default_module_plays_no_illegal_move_at_tictactoe(framework: str) -> None:
    from pettingzoo.classic import tictactoe_v3

    from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

    module_class = None
    if framework == "torch":
        from ray_sampler.modules.torch_mlp import TorchMLPModule

        module_class = TorchMLPModule
    elif framework == "torch-lstm":
        from ray_sampler.modules.torch_lstm import TorchLSTMModule

        module_class = TorchLSTMModule
    runner = MultiAgentEnvRunner(
        EnvRunnerConfig(
            env=lambda cfg: tictactoe_v3.env(), num_envs_per_env_runner=4, rollout_fragment_length=50, seed=0,
            module_class=module_class,
        )
    )  # fmt: skip
    chunks = [c for _ in range(4) for c in runner.sample()]
    moves = [_moves(sa) for c in chunks for sa in c.agent_episodes.values() if len(sa)]
    mask = np.concatenate([m for m, _ in moves])
    actions = np.concatenate([a for _, a in moves])
    assert len(actions) >= 700 and mask[np.arange(len(actions)), actions].all()
    # An illegal move ends a game with -1 for the offender only: every finished game here sums to 0.
    finished = [c for c in chunks if c.is_done]
    assert len(finished) >= 50 and all(c.get_return(include_hanging_rewards=True) == 0 for c in finished)


@pytest.mark.parametrize("random_actions", [False, True], ids=["module", "random-actions"])
def test_a_single_agent_runner_keeps_to_the_mask(random_actions: bool) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(env=MaskedPickEnv, num_envs_per_env_runner=2, rollout_fragment_length=100, seed=0)
    )
    episodes = runner.sample(random_actions=random_actions)
    moves = [_moves(ep) for ep in episodes if len(ep)]
    mask, actions = np.concatenate([m for m, _ in moves]), np.concatenate([a for _, a in moves])
    assert len(actions) == 200 and mask[np.arange(200), actions].all()
    assert not any(ep.get_infos(-1).get("illegal_move") for ep in episodes)
