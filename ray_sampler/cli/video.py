"""``ray-sampler evaluate --video DIR`` and ``--render``: the evaluation env built to render, its episodes as MP4 files.

The env is asked for frames through its config: ``env_config["render_mode"]`` is ``"rgb_array"``
(``--video``) or ``"human"`` (``--render``). A gymnasium id passes it to ``gymnasium.make``, a
PettingZoo module to its ``parallel_env``; an env class or creator of the user's reads it from the
config it is given (the convention). Before any episode runs, one env is built that way and probed:
an env that does not render so is refused in one line naming it and the flag.

Videos: every evaluation episode is recorded by gymnasium's ``RecordVideo`` (moviepy writes the
MP4, with the ffmpeg binary ``imageio-ffmpeg`` ships: ``pip install 'ray-sampler[video]'``) into
``DIR/<env>-episode-<k>.mp4``, ``k`` the episode's index in ``evaluation.json`` from 0. A video of
an episode of length L holds exactly L + 1 frames, the reset's and one per env step (a multi-agent
env's ``render()``: one per env step, whichever agents acted), at the env's ``render_fps`` (else 30).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import RecordVideo

from ray_sampler.cli.options import UsageError
from ray_sampler.errors import first_line
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import MULTI_AGENT_PREFIX, EnvContext, env_name, resolve_creator
from ray_sampler.sampling.multi_agent_env import MultiAgentEnv, is_multi_agent_env
from ray_sampler.sampling.pettingzoo_env import wrap_pettingzoo

__all__ = [
    "VIDEO_INSTALL",
    "RecordingCreator",
    "check_display",
    "check_video_encoder",
    "check_video_folder",
    "probe_render",
    "recording_runner",
    "render_env_config",
    "use_headless_sdl",
    "video_files",
    "video_prefix",
]

VIDEO_INSTALL = "pip install 'ray-sampler[video]'"
"""What installs the video encoder (moviepy, and imageio-ffmpeg's ffmpeg binary)."""

_HEADLESS_SDL_DRIVERS = ("dummy", "offscreen")
"""SDL video drivers that show no window (pygame falls back to ``offscreen`` where no display answers)."""


def check_video_encoder() -> None:
    """UsageError (one line, with the pip command) where moviepy 2, which the videos are written with,
    does not import."""
    try:
        importlib.import_module("moviepy").VideoClip  # noqa: B018  # moviepy 1 kept it in moviepy.editor
    except Exception as e:  # missing, too old, or broken (e.g. no ffmpeg binary): no video can be written
        raise UsageError(
            f"--video needs moviepy >= 2 to write MP4 files ({type(e).__name__}: {first_line(e)}): {VIDEO_INSTALL}"
        ) from None


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True  # a desktop session's window server; an SDL driver that shows nothing is caught by the probe
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def check_display() -> None:
    """UsageError (one line) for ``--render`` where no window can be shown: no X or Wayland display,
    or SDL told to draw nowhere."""
    driver = os.environ.get("SDL_VIDEODRIVER", "")
    if driver in _HEADLESS_SDL_DRIVERS:
        raise UsageError(
            f"--render: SDL_VIDEODRIVER={driver} shows no window; unset it, or record the episodes with --video DIR"
        )
    if not _has_display():
        raise UsageError(
            "--render needs a display (neither DISPLAY nor WAYLAND_DISPLAY is set); record the episodes with "
            "--video DIR instead"
        )


def use_headless_sdl() -> None:
    """Where there is no display, SDL's ``dummy`` video driver for envs that draw their frames with
    pygame (unless SDL_VIDEODRIVER is set): SDL would otherwise try each display system first and
    print an error line for each (no window is wanted for ``rgb_array`` frames)."""
    if not _has_display():
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def render_env_config(env_config: dict[str, Any], mode: str, *, flag: str) -> dict[str, Any]:
    """``env_config`` with ``render_mode`` set to ``mode``; UsageError if it asks for another mode."""
    given = env_config.get("render_mode")
    if given is not None and given != mode:
        raise UsageError(f"{flag} renders with render_mode {mode!r}; --env-config sets render_mode {given!r}")
    return {**env_config, "render_mode": mode}


def _make_inner(creator: Callable[..., Any], ctx: EnvContext, *, is_multi_agent: bool) -> Any:
    """What the recorder wraps: the creator's env (a PettingZoo env in its adapter)."""
    env = creator(ctx)
    return wrap_pettingzoo(env) if is_multi_agent else env


def _first_context(env_config: dict[str, Any]) -> EnvContext:
    """The context of a runner's only sub-env in this process (as ``make_one_env`` gives)."""
    return EnvContext(env_config, worker_index=0, vector_index=0, num_workers=0, num_envs=1)


def _can_not(runner: EnvRunnerConfig, mode: str, flag: str, why: str) -> UsageError:
    return UsageError(f"{flag}: env {env_name(runner.env)!r} does not render {mode!r} ({why})")


def probe_render(runner: EnvRunnerConfig, *, mode: str, flag: str) -> tuple[int, int] | None:
    """Builds one env of ``runner`` as the evaluation runner will (its config says ``render_mode``),
    checks that it renders ``mode``, and closes it: the frame's (width, height) for ``"rgb_array"``
    (after a reset seeded 0), None for ``"human"``. UsageError naming the env and ``flag`` otherwise."""
    is_multi_agent = runner.multi_agent is not None
    creator = resolve_creator(runner.env)  # an env that does not exist: EnvCreatorError, as without the flag
    try:
        with warnings.catch_warnings():  # an env that cannot render is refused below, in one line of its own
            warnings.filterwarnings("ignore", message=".*render_mode=.* not in the possible render_modes")
            env = _make_inner(creator, _first_context(runner.env_config), is_multi_agent=is_multi_agent)
    except Exception as e:  # e.g. a gymnasium env whose constructor takes no render_mode
        raise _can_not(runner, mode, flag, f"building it with render_mode={mode!r} failed: {first_line(e)}") from None
    try:
        if isinstance(env, gym.vector.VectorEnv) or not isinstance(env, gym.Env):
            raise _can_not(runner, mode, flag, f"its creator returned a {type(env).__qualname__}, not one env")
        given = getattr(env, "render_mode", None)
        if given != mode:
            if isinstance(runner.env, str) and runner.env.startswith(MULTI_AGENT_PREFIX):
                how = "make_multi_agent builds its copies of a gymnasium id without one"
            else:
                how = "an env class or creator gets env_config['render_mode'] to pass on"
            raise _can_not(runner, mode, flag, f"its render_mode is {given!r}: {how}")
        try:
            env.reset(seed=0)
            frame = env.render()
        except Exception as e:
            why = f"reset() or render() raised {type(e).__name__}: {first_line(e)}"
            raise _can_not(runner, mode, flag, why) from None
        if mode == "human":
            _check_window()
            return None
        if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3 and frame.size):
            got = f"an array of shape {frame.shape}" if isinstance(frame, np.ndarray) else type(frame).__name__
            raise _can_not(runner, mode, flag, f"render() returned {got}, not an RGB image of shape (height, width, 3)")
        return int(frame.shape[1]), int(frame.shape[0])
    finally:
        env.close()


def _check_window() -> None:
    """UsageError where the env's window went to an SDL driver that shows nothing (pygame falls back
    to ``offscreen`` when no display answers, without an error)."""
    pygame = sys.modules.get("pygame")
    if pygame is None or not pygame.display.get_init():
        return
    driver = pygame.display.get_driver()
    if driver in _HEADLESS_SDL_DRIVERS:
        raise UsageError(
            f"--render: no display answered (SDL drew the window with its {driver!r} driver, which shows nothing); "
            "record the episodes with --video DIR instead"
        )


def video_prefix(env: str | Callable[..., Any]) -> str:
    """The video files' name prefix: the env's name with what a file name should not hold replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", env_name(env)).strip("_") or "env"


def video_files(folder: Path, prefix: str, *, num_episodes: int) -> list[Path]:
    """The videos of episodes ``0 .. num_episodes - 1`` that are in ``folder``, in episode order."""
    paths = (folder / f"{prefix}-episode-{k}.mp4" for k in range(num_episodes))
    return [p for p in paths if p.is_file()]


def check_video_folder(folder: Path, prefix: str) -> None:
    """UsageError where ``folder`` is a file, or already holds videos of this env (a later evaluation
    of fewer episodes would leave earlier ones beside its own)."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--video: {str(folder)!r} is a file, not a folder")
    if folder.is_dir():
        earlier = sorted(p.name for p in folder.glob(f"{prefix}-episode-*.mp4"))
        if earlier:
            raise UsageError(
                f"--video: {str(folder)!r} already holds videos of this env ({earlier[0]}, {len(earlier)} in all): "
                "give a new or empty folder"
            )


class _EpisodeVideo(RecordVideo):
    """RecordVideo whose MP4 holds exactly the frames it recorded, frame k shown at k / fps.

    Why not RecordVideo's own writer: moviepy's ImageSequenceClip sums 1/fps once per frame and
    floors duration x fps, which drops the last frame for some lengths (251 frames at 50 fps give
    250), and finds a frame by comparing float32 start times, which at some rates shows a frame
    twice and skips the next. Here the clip asks for frame ``round(t x fps)``, over a duration half
    a frame longer than the frames, so moviepy's floor gives their number."""

    def stop_recording(self) -> None:
        frames, name = self.recorded_frames, self._video_name
        self.recorded_frames, self.recording, self._video_name = [], False, None
        if not frames:
            gym.logger.warn(f"{name}: no frame was rendered, no video written")
            return
        moviepy = importlib.import_module("moviepy")
        fps, last = self.frames_per_sec, len(frames) - 1

        def frame_at(t: float) -> Any:
            return frames[min(round(t * fps), last)]

        clip = moviepy.VideoClip(frame_function=frame_at, duration=(len(frames) + 0.5) / fps)
        clip.write_videofile(os.path.join(self.video_folder, f"{name}.mp4"), fps=fps, logger=None)


class _RecordedMultiAgentEnv(MultiAgentEnv):
    """A multi-agent env whose reset, step and render go through a ``RecordVideo`` around it (the
    recorder reads nothing of their dicts); its agents and spaces are the env's."""

    def __init__(self, env: Any, recorder: RecordVideo) -> None:
        super().__init__()
        self.env, self.recorder = env, recorder
        self.possible_agents = list(env.possible_agents)
        self.observation_spaces = {a: env.get_observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.get_action_space(a) for a in self.possible_agents}
        self.render_mode = env.render_mode

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        out = self.recorder.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return out

    def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        out = self.recorder.step(action_dict)
        self.agents = list(self.env.agents)
        return out  # type: ignore[return-value]  # the multi-agent env's five dicts, as they came

    def render(self) -> Any:
        return self.recorder.render()

    def close(self) -> None:
        self.recorder.close()  # writes the video of an episode still recording, then closes the env


def _render_fps(env: Any) -> int | None:
    """The env's ``render_fps`` (a PettingZoo adapter: its PettingZoo env's); None: RecordVideo's default."""
    for holder in (env, getattr(env, "env", None)):
        fps = getattr(holder, "metadata", None) or {}
        if isinstance(fps, dict) and fps.get("render_fps"):
            return int(fps["render_fps"])
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordingCreator:
    """The env creator of an evaluation runner that records: ``creator``'s env inside a ``RecordVideo``
    that writes episodes ``0 .. num_episodes - 1`` (the runner's next reset starts one more, never
    recorded) to ``folder/<name_prefix>-episode-<k>.mp4``."""

    creator: Callable[..., Any]
    """The env's creator (``resolve_creator`` of its name)."""
    folder: Path
    """Where the MP4 files go."""
    name_prefix: str
    """The files' names begin with it (``video_prefix``)."""
    num_episodes: int
    """Episodes recorded, from the first reset on."""
    is_multi_agent: bool = False
    """A multi-agent env (a PettingZoo env is wrapped in its adapter before the recorder)."""

    def _is_recorded(self, episode: int) -> bool:
        return episode < self.num_episodes

    def __call__(self, ctx: EnvContext) -> Any:
        env = _make_inner(self.creator, ctx, is_multi_agent=self.is_multi_agent)
        with warnings.catch_warnings():  # the folder was checked for earlier videos of this env
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
            recorder = _EpisodeVideo(
                env,
                str(self.folder),
                episode_trigger=self._is_recorded,
                name_prefix=self.name_prefix,
                fps=_render_fps(env),
                gc_trigger=None,  # an episode's frames go with its list: nothing to collect
            )
        if self.is_multi_agent and is_multi_agent_env(env):
            return _RecordedMultiAgentEnv(env, recorder)
        return recorder

    def __repr__(self) -> str:
        return f"{env_name(self.creator)} recorded to {str(self.folder)!r}"


def recording_runner(runner: EnvRunnerConfig, folder: Path, *, num_episodes: int) -> EnvRunnerConfig:
    """``runner`` with its env made by a ``RecordingCreator`` (one runner in this process: the
    creator is an object of this process, the files are written here)."""
    creator = RecordingCreator(
        creator=resolve_creator(runner.env),
        folder=folder,
        name_prefix=video_prefix(runner.env),
        num_episodes=num_episodes,
        is_multi_agent=runner.multi_agent is not None,
    )
    return dataclasses.replace(runner, env=creator)
