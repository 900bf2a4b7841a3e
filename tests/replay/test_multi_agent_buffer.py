"""MultiAgentEpisodeReplayBuffer: runner chunks stored per module whole, capacity in env steps, atomic adds,
independent and synchronized sampling, n-step on each agent's own steps, Parquet persistence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.data.multi_agent_columnar import multi_agent_episodes_to_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, DataFormatError, ReplayError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from replay.multi_agent_buffer import MultiAgentEpisodeReplayBuffer
from replay.multi_agent_persistence import restore_multi_agent_buffer, save_multi_agent_buffer
from tests.ray_sampler.ma_envs import RandomScheduleEnv, TurnTakingEnv

MAPPING = MultiAgentConfig(
    policies=("low", "high"), policy_mapping_fn=lambda aid, episode, **kw: "low" if aid in ("a0", "a1") else "high"
)


def schedule_runner(env_config: dict[str, Any] | None = None, **kwargs: Any) -> MultiAgentEnvRunner:
    config = EnvRunnerConfig(
        env=RandomScheduleEnv, env_config={"num_agents": 4, "max_steps": 20, **(env_config or {})},
        module_class=RandomModule,
        num_envs_per_env_runner=2, rollout_fragment_length=5, episode_lookback_horizon=2, multi_agent=MAPPING,
        **kwargs,
    )  # fmt: skip
    return MultiAgentEnvRunner(config)


def joined(chunks: list[MultiAgentEpisode]) -> dict[str, MultiAgentEpisode]:
    out: dict[str, MultiAgentEpisode] = {}
    for c in chunks:
        if c.id_ in out:
            out[c.id_].concat_episode(c)
        else:
            out[c.id_] = MultiAgentEpisode.from_state(c.get_state())
    return out


def stored_agent_episodes(buf: MultiAgentEpisodeReplayBuffer) -> dict[str, Any]:
    out = {}
    for module in buf.modules.values():
        ids = list(module.storage.episodes)
        out.update({ep.id_: ep for ep in columnar_to_episodes(module.storage.episodes_columnar(ids))})
    return out


def test_runner_chunks_are_stored_whole_per_module() -> None:
    runner, buf = schedule_runner(), MultiAgentEpisodeReplayBuffer(capacity_env_steps=10**6, seed=0)
    chunks = []
    for _ in range(20):
        got = runner.sample()
        assert buf.add(multi_agent_episodes_to_columnar(got)) == sum(len(c) for c in got)
        chunks += got
    whole = joined(chunks)
    assert buf.get_num_timesteps() == sum(len(ep) for ep in whole.values()) == 200
    assert buf.get_num_agent_timesteps() == sum(ep.agent_steps() for ep in whole.values())
    stored = stored_agent_episodes(buf)
    for ep in whole.values():
        for aid, sa in ep.agent_episodes.items():
            if not len(sa):
                continue  # joined at the last step: no step to store yet
            got = stored[sa.id_]  # in its module's storage, every chunk joined
            module = "low" if aid in ("a0", "a1") else "high"
            assert sa.id_ in buf.modules[module].storage.episodes
            assert np.asarray(got.get_observations()).tolist() == np.asarray(sa.get_observations()).tolist()
            assert np.asarray(got.get_actions()).tolist() == np.asarray(sa.get_actions()).tolist()
            assert np.asarray(got.get_rewards()).tolist() == np.asarray(sa.get_rewards()).tolist()
            assert (got.is_terminated, got.is_truncated) == (sa.is_terminated, sa.is_truncated)


def test_capacity_counts_env_steps_and_evicts_whole_episodes_from_every_module() -> None:
    runner, buf = schedule_runner(batch_mode="complete_episodes"), MultiAgentEpisodeReplayBuffer(capacity_env_steps=60)
    added = []
    for _ in range(10):
        eps = runner.sample()
        buf.add(eps)
        added += eps
    assert buf.get_num_timesteps() <= 60 + max(len(ep) for ep in added)  # the newest always stays
    kept = [ep for ep in added if ep.id_ in buf.records]
    assert 0 < len(kept) < len(added)
    assert kept == added[-len(kept) :]  # oldest first
    assert buf.get_num_timesteps() == sum(len(ep) for ep in kept)
    assert buf.num_episodes_evicted == len(added) - len(kept) and buf.num_env_steps_evicted == sum(
        len(ep) for ep in added[: len(added) - len(kept)]
    )
    stored = set(stored_agent_episodes(buf))
    assert stored == {sa.id_ for ep in kept for sa in ep.agent_episodes.values() if len(sa)}  # none evicted


def test_an_add_is_all_or_nothing() -> None:
    runner, buf = schedule_runner({"p_end": 0, "p_leave": 0}), MultiAgentEpisodeReplayBuffer(seed=0)
    first, second, third = runner.sample(), runner.sample(), runner.sample()  # episodes of 20 steps
    buf.add(first)
    before = (buf.get_num_timesteps(), buf.get_num_agent_timesteps(), len(buf.records))
    with pytest.raises(ReplayError, match="a gap or an overlap"):
        buf.add(third)  # skips the second call's chunks
    # A chunk whose agent data does not continue the stored agent chunk: refused by that module
    # before any module stores anything.
    broken = [MultiAgentEpisode.from_state(c.get_state()) for c in second]
    victim = next(c for c in broken if c.env_t_started > 0 and c.agent_episodes)
    sa = next(iter(victim.agent_episodes.values()))
    sa.set_observations(new_data=np.array([999, 999]), at_indices=0)
    with pytest.raises(ReplayError):
        buf.add(broken)
    assert (buf.get_num_timesteps(), buf.get_num_agent_timesteps(), len(buf.records)) == before
    buf.add(second)
    assert buf.add(second) == 0 and buf.num_duplicate_chunks_skipped == len(second)  # sent again: skipped


def turn_game() -> MultiAgentEpisode:
    env = TurnTakingEnv({"length": 5})  # p0 sees 5, 3, 1; p1 sees 4, 2; the mover gets 1 per move
    obs, infos = env.reset()
    ep = MultiAgentEpisode("game", agent_to_module_mapping_fn=lambda aid, episode: aid)
    ep.add_env_reset(observations=obs, infos=infos)
    while not ep.is_done:
        actions = dict.fromkeys(ep.get_agents_to_act(), 1)
        o, r, te, tr, inf = env.step(actions)
        ep.add_env_step(o, actions, r, inf, terminateds=te, truncateds=tr)
    return ep


def test_independent_n_step_walks_each_agents_own_steps() -> None:
    buf = MultiAgentEpisodeReplayBuffer(seed=1)
    buf.add(turn_game())
    batch = buf.sample(200, n_step=2, gamma=0.5, modules_to_sample=["p0"])["p0"]
    rows = set(zip(batch["obs"].ravel().tolist(), batch["rewards"].tolist(), batch["next_obs"].ravel().tolist(),
                   batch["n_step"].tolist(), batch["terminateds"].tolist()))  # fmt: skip
    # p0's own steps: 5 -> 3 -> 1 -> (its last observation repeated: the game ended on its move).
    assert rows == {(5.0, 1.5, 1.0, 2, False), (3.0, 1.5, 1.0, 2, True), (1.0, 1.0, 1.0, 1, True)}
    assert buf.get_num_timesteps() == 5 and buf.get_num_agent_timesteps() == 5


def test_synchronized_draws_env_steps_and_every_agent_that_acted_there() -> None:
    runner, buf = schedule_runner(), MultiAgentEpisodeReplayBuffer(seed=2)
    for _ in range(10):
        buf.add(runner.sample())
    out = buf.sample(64, replay_mode="synchronized")
    assert set(out) <= {"low", "high"} and out
    came_at: dict[int, set[int]] = {}
    for batch in out.values():
        assert batch["env_step_index"].max() < 64
        for d, env_step in zip(batch["env_step_index"].tolist(), batch["obs"][:, 0].tolist()):
            came_at.setdefault(d, set()).add(env_step)  # an observation is [env step, agent index]
    assert all(len(steps) == 1 for steps in came_at.values())  # one draw: one env step, every module
    assert sum(len(b["rewards"]) for b in out.values()) > 64  # several agents act at most env steps


def test_bad_sample_requests() -> None:
    buf = MultiAgentEpisodeReplayBuffer()
    with pytest.raises(ReplayError, match="holds no env steps yet"):
        buf.sample(4)
    buf.add(turn_game())
    with pytest.raises(ReplayError, match=r"'replay_mode' must be one of"):
        buf.sample(4, replay_mode="lockstep")
    with pytest.raises(ReplayError, match=r"'modules_to_sample' names modules with no data \['p9'\]"):
        buf.sample(4, modules_to_sample=["p9"])


class TestPersistence:
    def saved(self, tmp_path: Path) -> tuple[MultiAgentEpisodeReplayBuffer, MultiAgentEnvRunner, Path]:
        runner, buf = schedule_runner(), MultiAgentEpisodeReplayBuffer(capacity_env_steps=80, seed=3)
        for _ in range(12):
            buf.add(runner.sample())
        return buf, runner, save_multi_agent_buffer(buf, tmp_path / "ckpt")

    def test_restore_gives_back_an_equal_buffer(self, tmp_path: Path) -> None:
        buf, runner, path = self.saved(tmp_path)
        back = restore_multi_agent_buffer(path)
        assert back.get_num_timesteps() == buf.get_num_timesteps()
        assert back.get_num_agent_timesteps() == buf.get_num_agent_timesteps()
        assert list(back.records) == list(buf.records)
        assert back.num_episodes_evicted == buf.num_episodes_evicted > 0
        for mode in ("independent", "synchronized"):
            a, b = buf.sample(32, n_step=2, replay_mode=mode), back.sample(32, n_step=2, replay_mode=mode)
            assert a.keys() == b.keys()
            for mid in a:  # the same draws: the RNG states were saved too
                assert a[mid]["obs"].tolist() == b[mid]["obs"].tolist()
                assert a[mid]["rewards"].tolist() == b[mid]["rewards"].tolist()
        nxt = runner.sample()
        assert back.add(nxt) == buf.add(nxt)  # running episodes go on after the restore

    def test_restore_gives_back_the_sampled_counters(self, tmp_path: Path) -> None:
        buf, _, _ = self.saved(tmp_path)
        buf.sample(8, modules_to_sample=["low"])
        back = restore_multi_agent_buffer(save_multi_agent_buffer(buf, tmp_path / "again"))
        assert [back.get_sampled_timesteps(m) for m in (None, "low", "high")] == [8, 8, 0]

    def test_a_damaged_checkpoint_is_refused(self, tmp_path: Path) -> None:
        _, _, path = self.saved(tmp_path)
        manifest = path / "multi_agent.json"
        data = bytearray(manifest.read_bytes())
        data[len(data) // 2] ^= 0x01
        manifest.write_bytes(bytes(data))
        with pytest.raises(DataFormatError, match=r"multi_agent.json (does not match its digest|is not valid JSON)"):
            restore_multi_agent_buffer(path)
        (tmp_path / "b").mkdir()
        _, _, path = self.saved(tmp_path / "b")
        module = path / "module-0.parquet"
        data = bytearray(module.read_bytes())
        data[len(data) // 3] ^= 0x10
        module.write_bytes(bytes(data))
        with pytest.raises(DataFormatError, match=r"module 'high''s file module-0.parquet does not match its digest"):
            restore_multi_agent_buffer(path)
        module.unlink()
        with pytest.raises(DataFormatError, match=r"module 'high': No such file"):
            restore_multi_agent_buffer(path)

    def test_after_a_restore_a_running_episode_goes_on_after_a_gap(self, tmp_path: Path) -> None:
        buf, runner, path = self.saved(tmp_path)
        runner.sample()  # chunks made after the checkpoint and lost with the replay
        back = restore_multi_agent_buffer(path)
        evicted = back.num_episodes_evicted
        nxt = runner.sample()
        gaps = [c for c in nxt if c.id_ in back.records and c.env_t_started != back.records[c.id_].env_t]
        assert gaps  # the lost chunks leave a gap before these
        back.add(nxt)  # accepted: the stored part of each such episode goes, counted, and it starts again
        assert back.num_episodes_evicted == evicted + len(gaps)
        assert all(back.records[c.id_].env_t_started == c.env_t_started for c in gaps)
        with pytest.raises(ReplayError, match="a gap or an overlap"):
            buf.add(nxt)  # without a restore, a gap is refused

    def test_a_save_replaces_the_folder_whole(self, tmp_path: Path) -> None:
        buf, runner, path = self.saved(tmp_path)
        buf.add(runner.sample())
        save_multi_agent_buffer(buf, path)
        assert restore_multi_agent_buffer(path).get_num_timesteps() == buf.get_num_timesteps()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary folder left


def two_agent_episode(id_: str, length: int) -> MultiAgentEpisode:
    """A finished episode of ``length`` env steps in which both agents act every step: agent_1 on
    module_1, agent_2 on module_2; obs = t, action = t - 1, reward = t (as RLlib's test episode)."""
    ep = MultiAgentEpisode(id_, agent_module_ids={"agent_1": "module_1", "agent_2": "module_2"})
    ep.add_env_reset(observations={"agent_1": 0, "agent_2": 0})
    for t in range(1, length + 1):
        ep.add_env_step(
            {"agent_1": t, "agent_2": t}, {"agent_1": t - 1, "agent_2": t - 1},
            {"agent_1": float(t), "agent_2": float(t)}, terminateds={"__all__": t == length},
            truncateds={"__all__": False},
        )  # fmt: skip
    return ep


def counts(buf: MultiAgentEpisodeReplayBuffer) -> tuple[int, int, int, int, int]:
    return (
        buf.get_num_episodes(),
        buf.get_num_timesteps(),
        buf.get_num_agent_timesteps(),
        buf.get_added_agent_timesteps(),
        buf.get_added_timesteps(),
    )


def module_counts(buf: MultiAgentEpisodeReplayBuffer) -> set[tuple[int, int, int]]:
    """(episodes, timesteps, added timesteps) of each module: equal for both modules here."""
    return {
        (buf.get_num_episodes(m), buf.get_num_timesteps(m), buf.get_added_timesteps(m)) for m in buf.get_module_ids()
    }


class TestRLlibNames:
    def test_constructor_takes_rllibs_names(self) -> None:
        buf = MultiAgentEpisodeReplayBuffer(capacity=100, batch_size_B=4, batch_length_T=1)
        assert (buf.capacity_env_steps, buf.batch_size_B, buf.batch_length_T) == (100, 4, 1)

    def test_capacity_given_under_both_names_must_agree(self) -> None:
        assert MultiAgentEpisodeReplayBuffer(capacity=100, capacity_env_steps=100).capacity_env_steps == 100
        with pytest.raises(ConfigError, match=r"'capacity_env_steps' and 'capacity' name the same setting.*100 and 50"):
            MultiAgentEpisodeReplayBuffer(capacity=50, capacity_env_steps=100)

    def test_default_capacity_is_a_million_env_steps(self) -> None:
        # RLlib's default is 10_000; ours is the single-agent buffer's (see docs/replay.md).
        assert MultiAgentEpisodeReplayBuffer().capacity_env_steps == 10**6

    def test_batch_length_T_other_than_1_is_refused(self) -> None:
        with pytest.raises(
            ConfigError, match=r"'batch_length_T' must be 1: .*single \(n-step\) transitions.*\(got 64\)"
        ):
            MultiAgentEpisodeReplayBuffer(batch_length_T=64)
        buf = MultiAgentEpisodeReplayBuffer()
        buf.add(two_agent_episode("A", 3))
        with pytest.raises(ReplayError, match=r"'batch_length_T' must be 1: .*\(got 2\)"):
            buf.sample(4, batch_length_T=2)

    def test_bad_constructor_values_are_config_errors(self) -> None:
        with pytest.raises(ConfigError, match=r"'capacity_env_steps' must be an int >= 1 \(got 0\)"):
            MultiAgentEpisodeReplayBuffer(capacity=0)
        with pytest.raises(ConfigError, match=r"'batch_size_B' must be an int >= 1 \(got 0\)"):
            MultiAgentEpisodeReplayBuffer(batch_size_B=0)

    def test_counters_follow_rllibs_documented_eviction_numbers(self) -> None:
        # RLlib's test_add_and_eviction_logic, step for step (capacity 100 env steps, two agents
        # acting every step, one module each).
        buf = MultiAgentEpisodeReplayBuffer(capacity=100)
        buf.add(two_agent_episode("A", 50))
        assert counts(buf) == (1, 50, 100, 100, 50) and module_counts(buf) == {(1, 50, 50)}
        buf.add(two_agent_episode("B", 25))
        assert counts(buf) == (2, 75, 150, 150, 75) and module_counts(buf) == {(2, 75, 75)}
        buf.add(two_agent_episode("C", 25))  # full, nothing evicted yet
        assert counts(buf) == (3, 100, 200, 200, 100) and module_counts(buf) == {(3, 100, 100)}
        buf.add(two_agent_episode("D", 1))  # A goes
        assert counts(buf) == (3, 51, 102, 202, 101) and module_counts(buf) == {(3, 51, 101)}
        assert list(buf.records) == ["B", "C", "D"]
        buf.add(two_agent_episode("E", 200))  # the newest stays, alone, over capacity
        assert counts(buf) == (1, 200, 400, 602, 301) and module_counts(buf) == {(1, 200, 301)}
        buf.add(two_agent_episode("F", 2))
        assert counts(buf) == (1, 2, 4, 606, 303) and module_counts(buf) == {(1, 2, 303)}
        for i in range(10):
            buf.add(two_agent_episode(str(i), 10))
        assert counts(buf) == (10, 100, 200, 806, 403) and module_counts(buf) == {(10, 100, 403)}
        buf.add(two_agent_episode("G", 21))  # 0, 1 and 2 go
        assert counts(buf) == (8, 91, 182, 848, 424) and module_counts(buf) == {(8, 91, 424)}
        assert list(buf.records) == ["3", "4", "5", "6", "7", "8", "9", "G"]
        assert buf.get_num_episodes_evicted() == 9  # A to F, 0 to 2
        assert {buf.get_num_episodes_evicted(m) for m in buf.get_module_ids()} == {9}

    def test_a_module_not_seen_counts_zero(self) -> None:
        buf = MultiAgentEpisodeReplayBuffer()
        buf.add(two_agent_episode("A", 3))
        assert (buf.get_num_timesteps("m9"), buf.get_added_timesteps("m9"), buf.get_sampled_timesteps("m9")) == (
            0,
            0,
            0,
        )

    def test_sample_takes_num_items_or_batch_size_B(self) -> None:
        buf = MultiAgentEpisodeReplayBuffer(batch_size_B=3, seed=0)
        buf.add(two_agent_episode("A", 5))
        sizes = [
            {m: len(b["rewards"]) for m, b in buf.sample(**kw).items()}
            for kw in ({"num_items": 4}, {"batch_size_B": 6}, {})
        ]
        assert sizes == [{"module_1": 4, "module_2": 4}, {"module_1": 6, "module_2": 6}, {"module_1": 3, "module_2": 3}]
        with pytest.raises(ReplayError, match=r"'batch_size_B' and 'num_items' name the same setting.*6 and 4"):
            buf.sample(4, batch_size_B=6)

    def test_sampled_timesteps_count_draws_and_each_modules_rows(self) -> None:
        buf = MultiAgentEpisodeReplayBuffer(seed=0)
        buf.add(two_agent_episode("A", 5))
        buf.sample(batch_size_B=16, n_step=1)
        buf.sample(batch_size_B=16, n_step=1, modules_to_sample=["module_1"])
        assert buf.get_sampled_timesteps() == 32
        assert (buf.get_sampled_timesteps("module_1"), buf.get_sampled_timesteps("module_2")) == (32, 16)
        out = buf.sample(batch_size_B=8, replay_mode="synchronized")  # both agents act at every env step
        assert {m: len(b["rewards"]) for m, b in out.items()} == {"module_1": 8, "module_2": 8}
        assert (buf.get_sampled_timesteps(), buf.get_sampled_timesteps("module_2")) == (40, 24)

    def test_independent_rows_follow_rllibs_transition_layout(self) -> None:
        # (o_t, a_t, r_t+1, o_t+1): the action is o_t, the reward and the next observation o_t + 1.
        buf = MultiAgentEpisodeReplayBuffer(seed=0)
        buf.add(two_agent_episode("A", 5))
        for batch in buf.sample(batch_size_B=32, n_step=1).values():
            obs = batch["obs"].tolist()
            assert batch["actions"].tolist() == obs
            assert batch["next_obs"].tolist() == [o + 1 for o in obs]
            assert batch["rewards"].tolist() == [float(o + 1) for o in obs]
            assert batch["terminateds"].tolist() == [o == 4 for o in obs]


def is_plain(value: Any) -> bool:
    """Plain data: dicts with str keys, lists, tuples, str, int, float, bool, None, bytes, numeric arrays."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuf"
    return value is None or isinstance(value, (str, int, float, bool, bytes))


class TestState:
    def filled(self) -> tuple[MultiAgentEpisodeReplayBuffer, MultiAgentEnvRunner]:
        runner, buf = schedule_runner(), MultiAgentEpisodeReplayBuffer(capacity=60, seed=5)
        for _ in range(8):
            buf.add(runner.sample())
        buf.sample(8)
        return buf, runner

    def test_get_state_is_plain_data(self) -> None:
        buf, _ = self.filled()
        state = buf.get_state()
        assert is_plain(state)
        assert all(isinstance(m["episodes"], bytes) for m in state["modules"].values())

    def test_set_state_gives_back_the_counters(self) -> None:
        buf, _ = self.filled()
        back = MultiAgentEpisodeReplayBuffer()
        back.set_state(buf.get_state())
        assert counts(back) == counts(buf) and back.capacity_env_steps == 60
        assert back.get_num_episodes_evicted() == buf.get_num_episodes_evicted() > 0
        assert back.get_sampled_timesteps() == buf.get_sampled_timesteps() == 8
        assert back.get_module_ids() == buf.get_module_ids() == ["high", "low"]
        for m in buf.get_module_ids():
            assert back.get_num_timesteps(m) == buf.get_num_timesteps(m)
            assert back.get_added_timesteps(m) == buf.get_added_timesteps(m)
            assert back.get_num_episodes(m) == buf.get_num_episodes(m)
            assert back.get_sampled_timesteps(m) == buf.get_sampled_timesteps(m)

    def test_set_state_samples_what_the_original_would(self) -> None:
        buf, _ = self.filled()
        back = MultiAgentEpisodeReplayBuffer()
        back.set_state(buf.get_state())
        for mode in ("independent", "synchronized", "independent"):
            a, b = buf.sample(32, n_step=(1, 3), replay_mode=mode), back.sample(32, n_step=(1, 3), replay_mode=mode)
            assert a.keys() == b.keys() and a
            for m in a:
                for col in ("obs", "actions", "rewards", "next_obs", "n_step", "terminateds", "truncateds"):
                    assert a[m][col].tolist() == b[m][col].tolist()

    def test_after_set_state_running_episodes_take_their_next_chunk(self) -> None:
        buf, runner = self.filled()
        back = MultiAgentEpisodeReplayBuffer()
        back.set_state(buf.get_state())
        nxt = runner.sample()
        assert back.add(nxt) == buf.add(nxt)
        assert counts(back) == counts(buf)

    def test_after_set_state_a_gap_is_still_refused(self) -> None:
        # Unlike a checkpoint restore (chunks made after it were lost), the state is whole.
        runner, buf = schedule_runner({"p_end": 0, "p_leave": 0}), MultiAgentEpisodeReplayBuffer()
        for _ in range(2):  # episodes of 20 steps: 10 stored, running
            buf.add(runner.sample())
        back = MultiAgentEpisodeReplayBuffer()
        back.set_state(buf.get_state())
        runner.sample()
        with pytest.raises(ReplayError, match="a gap or an overlap"):
            back.add(runner.sample())

    def test_set_state_refuses_what_get_state_did_not_give(self) -> None:
        buf = MultiAgentEpisodeReplayBuffer()
        with pytest.raises(DataFormatError, match=r"set_state takes a dict of format .* \(got None\)"):
            buf.set_state({"capacity_env_steps": 10})
        state = MultiAgentEpisodeReplayBuffer().get_state()
        del state["records"]
        with pytest.raises(DataFormatError, match=r"set_state: malformed state \(KeyError: 'records'\)"):
            buf.set_state(state)
