"""Atari (the ``atari`` extra): ALE games with the standard preprocessing, as gymnasium ids ``ray_sampler/<Game>-v5``.

Each ALE v5 game ``ALE/<Game>-v5`` gets an id ``ray_sampler/<Game>-v5`` (registered when
``ray_sampler.envs`` is imported and ``ale-py`` is installed, so that runner actors know it too):
the same game (sticky actions 0.25, the minimal action set, at most 108,000 frames) with
gymnasium's ``AtariPreprocessing``: frame skip 4 (a max over the last two frames), up to 30 noops
at reset, one 84x84 grayscale uint8 frame per step. There is no frame stacking (that is a
connector's job). Rewards are the game's, unclipped; a life lost does not end the episode.

Both vectorization modes give the same observations, spaces and step semantics:
``"sync"`` steps single envs (``ale_py``'s ``AtariEnv`` made with ``frameskip=1``, then
``AtariPreprocessing``); ``"vector_entry_point"`` is ``ale_py``'s ``AtariVectorEnv`` (C++
threads) set to the same preprocessing (``stack_num=1``, no reward clipping, no fire at reset),
its frame-stack axis dropped. Their random streams differ, so their episodes do not.

``atari_env("ALE/Pong-v5")`` returns the id, and raises ``EnvCreatorError`` with the install line
where ``ale-py`` is missing, in the driver before any actor starts.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.errors import EnvCreatorError

__all__ = [
    "ATARI_INSTALL_LINE",
    "ATARI_NAMESPACE",
    "atari_env",
    "atari_install_hint",
    "make_atari_env",
    "make_atari_vector_env",
    "register_atari_envs",
]

ATARI_NAMESPACE = "ray_sampler"
"""The gymnasium namespace of the preprocessed Atari ids: ``ray_sampler/Pong-v5``."""
ATARI_INSTALL_LINE = 'pip install "ray-sampler[atari]"'
"""What installs ale-py (with its ROMs) and opencv, which AtariPreprocessing needs."""

_FRAME_SKIP = 4
_SCREEN_SIZE = 84
_NOOP_MAX = 30
_MAX_FRAMES = 108_000  # ALE v5's limit: 30 minutes of play (27,000 steps at frame skip 4)


def _has_ale() -> bool:
    return importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("cv2") is not None


def atari_install_hint(env: str) -> str:
    """A sentence with the install line where ``env`` names an Atari id and ale-py is missing, else ``""``."""
    if not (env.startswith(("ALE/", f"{ATARI_NAMESPACE}/")) and env.endswith("-v5")) or _has_ale():
        return ""
    return f"; {env!r} is an Atari id, which needs ale-py and opencv: {ATARI_INSTALL_LINE}"


def atari_env(ale_id: str) -> str:
    """The id of ALE game ``ale_id`` (``"ALE/Pong-v5"``) with the standard preprocessing: ``"ray_sampler/Pong-v5"``.

    >>> atari_env("ALE/Pong-v5")
    'ray_sampler/Pong-v5'
    """
    if not _has_ale():
        raise EnvCreatorError(
            f"atari_env({ale_id!r}) needs ale-py and opencv, which are not installed: {ATARI_INSTALL_LINE}"
        )
    register_atari_envs()
    name = ale_id.removeprefix("ALE/")
    our_id = f"{ATARI_NAMESPACE}/{name}"
    if not ale_id.startswith("ALE/") or our_id not in gym.registry:
        games = sorted(k for k in gym.registry if k.startswith(f"{ATARI_NAMESPACE}/") and k.endswith("-v5"))
        raise EnvCreatorError(
            f"atari_env: 'ale_id' must be an ALE v5 id such as 'ALE/Pong-v5' ({len(games)} games) (got {ale_id!r})"
        )
    return our_id


def register_atari_envs() -> None:
    """Registers ``ray_sampler/<Game>-v5`` for every ALE v5 game (nothing where ale-py is missing)."""
    if not _has_ale():
        return
    importlib.import_module("ale_py")  # registers ALE's own ids, ALE/<Game>-v5
    for spec in list(gym.registry.values()):
        if spec.namespace != "ALE" or spec.version != 5:
            continue
        our_id = f"{ATARI_NAMESPACE}/{spec.name}-v5"
        if our_id not in gym.registry:
            gym.register(
                our_id,
                entry_point="ray_sampler.envs.atari:make_atari_env",
                vector_entry_point="ray_sampler.envs.atari:make_atari_vector_env",
                kwargs={"game": spec.kwargs["game"]},
            )


def make_atari_env(
    *,
    game: str,
    repeat_action_probability: float = 0.25,
    full_action_space: bool = False,
    max_num_frames_per_episode: int = _MAX_FRAMES,
    render_mode: str | None = None,
) -> gym.Env:
    """One ALE game (``game``: ALE's rom name, ``"pong"``) through ``AtariPreprocessing`` (see the module docstring)."""
    ale_env = importlib.import_module("ale_py.env")
    env = ale_env.AtariEnv(
        game=game,
        frameskip=1,  # AtariPreprocessing skips frames itself (and max-pools the last two)
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        max_num_frames_per_episode=max_num_frames_per_episode,
        render_mode=render_mode,
    )
    return gym.wrappers.AtariPreprocessing(
        env,
        noop_max=_NOOP_MAX,
        frame_skip=_FRAME_SKIP,
        screen_size=_SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )


def make_atari_vector_env(
    *,
    game: str,
    num_envs: int = 1,
    repeat_action_probability: float = 0.25,
    full_action_space: bool = False,
    max_num_frames_per_episode: int = _MAX_FRAMES,
    max_episode_steps: int | None = None,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ALE game ``game`` in ALE's own vector env, preprocessed as ``make_atari_env``'s.

    ``max_episode_steps`` (the runner's ``max_episode_steps``) truncates after that many steps, as the
    ``TimeLimit`` of the sync path does: ALE counts frames, so it becomes a frame limit.
    """
    if max_episode_steps is not None:
        max_num_frames_per_episode = min(max_num_frames_per_episode, max_episode_steps * _FRAME_SKIP)
    return _SingleFrameVectorEnv(
        game,
        num_envs,
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        max_num_frames_per_episode=max_num_frames_per_episode,
    )


def _vector_base() -> type:
    vector_env: Any = importlib.import_module("ale_py.vector_env")
    base: type = vector_env.AtariVectorEnv
    return base


class _SingleFrameVectorEnv(gym.vector.VectorEnv):
    """ALE's ``AtariVectorEnv`` with ``make_atari_env``'s preprocessing and observations [N, 84, 84]."""

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        repeat_action_probability: float,
        full_action_space: bool,
        max_num_frames_per_episode: int,
    ) -> None:
        self.env = _vector_base()(
            game,
            num_envs,
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            max_num_frames_per_episode=max_num_frames_per_episode,
            img_height=_SCREEN_SIZE,
            img_width=_SCREEN_SIZE,
            grayscale=True,
            stack_num=1,  # one frame per step: stacking is a connector's job
            frameskip=_FRAME_SKIP,
            maxpool=True,
            noop_max=_NOOP_MAX,
            episodic_life=False,
            reward_clipping=False,  # AtariPreprocessing leaves rewards as they are
            use_fire_reset=False,  # AtariPreprocessing does not press FIRE at reset either
        )
        self.num_envs = num_envs
        self.metadata = dict(self.env.metadata)
        self.single_action_space = self.env.single_action_space
        self.action_space = self.env.action_space
        self.single_observation_space = gym.spaces.Box(0, 255, (_SCREEN_SIZE, _SCREEN_SIZE), np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs[:, 0], info  # [N, 1, 84, 84] -> [N, 84, 84]: a view, ALE returns a new array every call

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, info = self.env.step(np.asarray(actions))
        return obs[:, 0], rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
