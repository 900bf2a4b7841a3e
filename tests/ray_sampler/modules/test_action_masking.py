"""Action masking: the random players and the torch module never pick a forbidden action; bad spaces
are refused in one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.errors import SpaceError
from ray_sampler.modules import RandomModule
from ray_sampler.modules.action_masking import MASKED_LOGIT, MaskedRandomModule

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
