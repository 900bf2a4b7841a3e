"""The ``ray-sampler`` command line: ``ray-sampler demo`` builds, cuts, joins and packs real episodes."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import gymnasium as gym
import numpy as np

from ray_sampler.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.columnar import columnar_to_episodes, episodes_to_columnar
from ray_sampler.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError

__all__ = ["DemoConfig", "main", "run_demo"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Knobs of ``ray-sampler demo``."""

    env: str = "CartPole-v1"
    """Gymnasium id of the env to step with random actions."""
    num_env_steps: int = 2000
    """Env steps to collect."""
    cut_every: int = 100
    """Cut the ongoing episode every this many env steps (as a runner does between sample() calls)."""
    lookback: int = 4
    """Steps of lookback each continuation chunk keeps."""
    seed: int = 0
    """Seed of the env and the random actions."""

    def __post_init__(self) -> None:
        for name in ("num_env_steps", "cut_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"'{name}' must be an int >= 1 (got {value!r})")
        if not isinstance(self.lookback, int) or self.lookback < 0:
            raise ConfigError(f"'lookback' must be an int >= 0 (got {self.lookback!r})")


def _collect(cfg: DemoConfig) -> list[SingleAgentEpisode]:
    """Steps the env, cutting the ongoing episode every ``cut_every`` steps; returns all chunks."""
    env = gym.make(cfg.env)
    env.action_space.seed(cfg.seed)
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
    chunks: list[SingleAgentEpisode] = []
    episode = SingleAgentEpisode(**spaces)
    episode.add_env_reset(*env.reset(seed=cfg.seed))
    for t in range(1, cfg.num_env_steps + 1):
        action = env.action_space.sample()
        obs, reward, terminated, truncated, infos = env.step(action)
        episode.add_env_step(obs, action, reward, infos, terminated=terminated, truncated=truncated)
        if episode.is_done:
            chunks.append(episode)
            episode = SingleAgentEpisode(**spaces)
            episode.add_env_reset(*env.reset())
        elif t % cfg.cut_every == 0:
            chunks.append(episode)
            episode = episode.cut(len_lookback_buffer=cfg.lookback)
    chunks.append(episode)
    env.close()
    return chunks


def run_demo(cfg: DemoConfig) -> None:
    """Collects chunks, joins them, packs them to columnar and Arrow form, and prints each step."""
    print(f"ray-sampler demo: {cfg.env}, {cfg.num_env_steps} env steps, random actions, seed {cfg.seed}")
    chunks = _collect(cfg)
    whole: dict[str, SingleAgentEpisode] = {}
    for chunk in chunks:
        if chunk.id_ in whole:
            whole[chunk.id_].concat_episode(chunk)
        else:
            whole[chunk.id_] = SingleAgentEpisode.from_state(chunk.get_state())
    done = [e for e in whole.values() if e.is_done]
    steps = sum(len(e) for e in whole.values())
    print(f"collected {len(chunks)} chunks of {len(whole)} episodes "
          f"(cut every {cfg.cut_every} steps, lookback {cfg.lookback})")
    if done:
        print(f"episodes done: {len(done)}, mean return {np.mean([e.get_return() for e in done]):.1f}, "
              f"mean length {np.mean([len(e) for e in done]):.1f}")
    status = "no step lost or duplicated" if steps == cfg.num_env_steps else "STEP COUNT MISMATCH"
    print(f"joined chunks with concat_episode: {len(whole)} episodes, {steps} steps ({status})")
    col = episodes_to_columnar(chunks)
    per_step = col.serialized_nbytes() / col.num_env_steps
    print(f"columnar: {col.num_env_steps} steps + {int(col.lookback_lens.sum())} lookback steps, "
          f"{per_step:.1f} bytes/step shipped (raw {col.raw_step_nbytes()}, ratio {per_step / col.raw_step_nbytes():.2f})")
    table = columnar_to_arrow(col)
    back = columnar_to_episodes(arrow_to_columnar(table))
    same = all(
        np.array_equal(a.to_numpy().get_observations(slice(-len(a) - 1 - a.len_lookback_buffer, None)),
                       b.get_observations(slice(-len(b) - 1 - b.len_lookback_buffer, None)))
        and np.array_equal(a.get_actions(), b.get_actions()) and a.get_return() == b.get_return()
        for a, b in zip(chunks, back)
    )
    print(f"arrow: {table.num_rows} rows x {table.num_columns} columns; round trip equal: {'yes' if same else 'NO'}")
    if steps != cfg.num_env_steps or not same:
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ray-sampler`` command."""
    parser = argparse.ArgumentParser(prog="ray-sampler", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build, cut, join and pack episodes from a real gymnasium env")
    for field in dataclasses.fields(DemoConfig):
        demo.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    args = parser.parse_args(argv)
    cfg = DemoConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(DemoConfig)})
    run_demo(cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
