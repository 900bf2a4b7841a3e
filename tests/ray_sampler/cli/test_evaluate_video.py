"""``ray-sampler evaluate --video DIR`` and ``--render``: an MP4 file per episode, frame for frame; the refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import imageio_ffmpeg
import numpy as np
import pytest

from ray_sampler.cli import EXIT_USAGE, main
from ray_sampler.policy import MultiAgentPolicy
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import sub_env_seeds
from ray_sampler.sampling.evaluation import evaluation_seed
from ray_sampler.sampling.multi_agent_env import ALL, MultiAgentEnv
from ray_sampler.sampling.runner_build import build_policy

HERE = __name__  # this module, as --env's 'module:Name' form names it
CARTPOLE_OBS = gym.make("CartPole-v1").observation_space


class NoRenderEnv(gym.Env):
    """A 3-step env that has no render modes and takes no ``render_mode`` (an env class: the config)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  # gymnasium's class attribute
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 3, False, {}


class NoFrameEnv(NoRenderEnv):
    """Says it renders 'rgb_array', and its render() gives None."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}  # noqa: RUF012

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self.render_mode = (config or {}).get("render_mode")

    def render(self) -> None:
        return None


NO_RENDER_ID = "RaySamplerTestNoRender-v0"
"""NoRenderEnv as a gymnasium id: ``gymnasium.make(id, render_mode=...)`` fails in its constructor."""
if NO_RENDER_ID not in gym.registry:
    gym.register(NO_RENDER_ID, entry_point=NoRenderEnv)


class PaintedAgentsEnv(MultiAgentEnv):
    """Two agents for ``length`` env steps (then truncated); frame t of an episode is a 64x48 image
    of one grey level, 40 x t, so a video's frames say which env step they show."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = config or {}
        self.render_mode = config.get("render_mode")
        self.length = int(config.get("length", 5))
        self.possible_agents = ["a0", "a1"]
        self.observation_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Box(0.0, 100.0, (1,), np.float32))
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.t = 0

    def _obs(self) -> dict:
        return {a: np.array([self.t], np.float32) for a in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._obs(), {}

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        self.t += 1
        done = self.t >= self.length
        if done:
            self.agents = []
        flags = dict.fromkeys(self.possible_agents, False)
        return self._obs(), dict.fromkeys(action_dict, 1.0), {**flags, ALL: False}, {**flags, ALL: done}, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((48, 64, 3), 40 * self.t, np.uint8)


def _policy_folder(
    tmp_path: Path, env: str, observation_space: gym.Space, action_space: gym.Space, env_config: dict | None = None
) -> Path:
    """An untrained PPO policy of ``env``, saved as ``tmp_path/policy``."""
    info = {"algo": "ppo", "env": env, "env_config": env_config or {}}
    policy = build_policy(EnvRunnerConfig(env=env), observation_space, action_space, info=info, seed=0)
    return policy.save(tmp_path / "policy")


def _multi_agent_folder(
    tmp_path: Path, env: str, agents: list[str], spaces: tuple[gym.Space, gym.Space], **kw: Any
) -> Path:
    """An untrained multi-agent policy of ``env``: one module shared by ``agents``."""
    info = {"algo": "ppo", "env": env, "env_config": kw}
    shared = build_policy(EnvRunnerConfig(env=env), *spaces, info=info, seed=0)
    return MultiAgentPolicy({"shared": shared}, dict.fromkeys(agents, "shared"), info=info).save(tmp_path / "policy")


def _evaluate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[object, str, str]:
    """(exit code, stdout, stderr) of ``ray-sampler evaluate ARGV`` run in this process."""
    try:
        main(["evaluate", *argv])
        code: object = 0
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _frames(path: Path) -> tuple[tuple[int, int], list[np.ndarray]]:
    """A video's (width, height) and its frames, decoded by imageio-ffmpeg's ffmpeg."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    return (width, height), [np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader]


@pytest.fixture(autouse=True)
def _headless_sdl(monkeypatch: pytest.MonkeyPatch) -> None:
    """SDL draws nowhere, as a machine without a display gets it, and the setting goes with the test."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


class TestVideo:
    def test_each_episode_is_one_mp4_of_its_frames(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        videos, out = tmp_path / "videos", tmp_path / "evaluation.json"
        argv = [str(folder), "--episodes", "2", "--max-episode-steps", "30", "--video", str(videos), "--out", str(out)]
        code, stdout, err = _evaluate(capsys, *argv)
        assert code == 0, err
        record = json.loads(out.read_text())
        names = ["CartPole-v1-episode-0.mp4", "CartPole-v1-episode-1.mp4"]
        assert sorted(p.name for p in videos.iterdir()) == names
        assert record["videos"] == [str(videos / name) for name in names]
        assert "videos: 2 MP4 files in " in stdout and "600x400" in stdout
        for name, length in zip(names, record["episode_lengths"]):
            size, frames = _frames(videos / name)
            assert (size, len(frames)) == ((600, 400), length + 1)  # the reset's frame and one per step
        # The first frame is the evaluation env's first reset (seeded from the run's evaluation stream).
        env = gym.make("CartPole-v1", render_mode="rgb_array")
        seeds = sub_env_seeds(evaluation_seed(0), 0, 1)
        assert seeds is not None
        env.reset(seed=seeds[0])
        first = env.render().astype(np.int16)
        env.reset(seed=seeds[0] + 1)
        other = env.render().astype(np.int16)
        decoded = _frames(videos / names[0])[1][0].astype(np.int16)
        assert np.abs(decoded - first).mean() < np.abs(decoded - other).mean() / 2

    def test_a_multi_agent_env_records_one_frame_per_env_step(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        env = f"{HERE}:PaintedAgentsEnv"
        spaces = (gym.spaces.Box(0.0, 100.0, (1,), np.float32), gym.spaces.Discrete(2))
        folder = _multi_agent_folder(tmp_path, env, ["a0", "a1"], spaces, length=5)
        videos, out = tmp_path / "videos", tmp_path / "evaluation.json"
        code, _, err = _evaluate(capsys, str(folder), "--episodes", "2", "--video", str(videos), "--out", str(out))
        assert code == 0, err
        assert json.loads(out.read_text())["episode_lengths"] == [5, 5]
        prefix = env.replace(":", "_")
        assert sorted(p.name for p in videos.iterdir()) == [f"{prefix}-episode-0.mp4", f"{prefix}-episode-1.mp4"]
        for k in range(2):
            size, frames = _frames(videos / f"{prefix}-episode-{k}.mp4")
            assert size == (64, 48)
            assert [round(float(f.mean()) / 40) for f in frames] == [0, 1, 2, 3, 4, 5]

    def test_a_pettingzoo_env_renders_through_its_adapter(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        pytest.importorskip("mpe2")
        env = "pettingzoo:mpe2.simple_spread_v3"
        spaces = (gym.spaces.Box(-np.inf, np.inf, (18,), np.float32), gym.spaces.Discrete(5))
        agents = ["agent_0", "agent_1", "agent_2"]
        folder = _multi_agent_folder(tmp_path, env, agents, spaces, max_cycles=3)
        videos, out = tmp_path / "videos", tmp_path / "evaluation.json"
        code, _, err = _evaluate(capsys, str(folder), "--episodes", "1", "--video", str(videos), "--out", str(out))
        assert code == 0, err
        assert json.loads(out.read_text())["episode_lengths"] == [3]
        size, frames = _frames(videos / "pettingzoo_mpe2.simple_spread_v3-episode-0.mp4")
        assert (size, len(frames)) == ((700, 700), 4)


class TestRefusals:
    @pytest.mark.parametrize(
        ("env", "why"),
        [
            (f"{HERE}:NoRenderEnv", "its render_mode is None"),
            (NO_RENDER_ID, "building it with render_mode='rgb_array' failed"),
            (f"{HERE}:NoFrameEnv", "render() returned NoneType"),
        ],
        ids=["render-mode-stays-none", "constructor-takes-none", "render-gives-no-array"],
    )
    def test_an_env_that_cannot_render_is_refused_before_any_episode(
        self, env: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        folder = _policy_folder(tmp_path, env, NoRenderEnv.observation_space, NoRenderEnv.action_space)
        videos, out = tmp_path / "videos", tmp_path / "evaluation.json"
        code, stdout, err = _evaluate(capsys, str(folder), "--video", str(videos), "--out", str(out))
        assert code == EXIT_USAGE
        lines = err.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(
            f"ray-sampler evaluate: error: --video: env {env!r} does not render 'rgb_array' ({why}"
        )
        assert not videos.exists() and not out.exists() and stdout == ""

    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (["--video", "v", "--num-env-runners", "1"], "--video needs the runner in this process"),
            (["--render", "--num-env-runners", "2"], "--render needs the runner in this process"),
            (["--video", "v", "--render"], "--video and --render: one at a time"),
        ],
        ids=["video-remote", "render-remote", "video-and-render"],
    )
    def test_a_flag_the_command_cannot_honour_is_one_line(
        self, flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        code, _, err = _evaluate(capsys, str(folder), *flags, "--out", str(tmp_path / "e.json"))
        assert code == EXIT_USAGE
        assert len(err.splitlines()) == 1 and message in err

    def test_without_the_extra_video_names_the_pip_command(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "moviepy", None)  # its import fails
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        code, _, err = _evaluate(capsys, str(folder), "--video", str(tmp_path / "v"), "--out", str(tmp_path / "e.json"))
        assert code == EXIT_USAGE
        assert len(err.splitlines()) == 1 and err.rstrip().endswith("pip install 'ray-sampler[video]'")

    def test_a_folder_with_videos_of_the_env_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        (tmp_path / "v").mkdir()
        (tmp_path / "v" / "CartPole-v1-episode-3.mp4").write_bytes(b"old")
        code, _, err = _evaluate(capsys, str(folder), "--video", str(tmp_path / "v"), "--out", str(tmp_path / "e.json"))
        assert code == EXIT_USAGE
        assert "already holds videos of this env (CartPole-v1-episode-3.mp4, 1 in all)" in err

    def test_render_without_a_display_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(sys, "platform", "linux")
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        code, _, err = _evaluate(capsys, str(folder), "--render", "--out", str(tmp_path / "e.json"))
        assert code == EXIT_USAGE
        assert err.splitlines() == [
            "ray-sampler evaluate: error: --render needs a display (neither DISPLAY nor WAYLAND_DISPLAY is set); "
            "record the episodes with --video DIR instead"
        ]

    def test_render_with_a_display_nobody_answers_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("DISPLAY", ":97")  # no X server there: SDL falls back to a driver that shows nothing
        monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
        monkeypatch.setattr(sys, "platform", "linux")
        folder = _policy_folder(tmp_path, "CartPole-v1", CARTPOLE_OBS, gym.spaces.Discrete(2))
        code, stdout, err = _evaluate(capsys, str(folder), "--render", "--out", str(tmp_path / "e.json"))
        assert code == EXIT_USAGE
        lines = [line for line in err.splitlines() if line.startswith("ray-sampler")]
        assert len(lines) == 1 and lines[0].startswith("ray-sampler evaluate: error: --render: ")
        assert not (tmp_path / "e.json").exists() and stdout == ""
