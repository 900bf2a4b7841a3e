"""SingleAgentEpisode: construction, growth, getters, cut/slice/concat, numpy form and state."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data import tree
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EpisodeError
from tests.helpers import SPACES, CountingEnv, assert_episodes_equal, episode_from_space, full_state


def counting_episode(num_steps: int, *, episode_len: int = 100) -> SingleAgentEpisode:
    env = CountingEnv(episode_len)
    ep = SingleAgentEpisode(observation_space=env.observation_space, action_space=env.action_space)
    ep.add_env_reset(*env.reset())
    for t in range(num_steps):
        obs, reward, terminated, truncated, infos = env.step(t % 2)
        ep.add_env_step(
            obs,
            t % 2,
            reward,
            infos,
            terminated=terminated,
            truncated=truncated,
            extra_model_outputs={"vf_preds": 0.5 * t},
        )
    return ep


def obs_values(ep: SingleAgentEpisode, indices: object = None) -> list[int]:
    return [int(np.asarray(o).reshape(-1)[0]) for o in ep.get_observations(indices)]


# ------------------------------------------------------------------ construction
def test_constructor_data_is_episode_data_by_default() -> None:
    # RLlib's "auto" default silently turns constructor data into lookback (length 0).
    ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[1.0, 2.0])
    assert len(ep) == 2
    assert ep.len_lookback_buffer == 0
    assert ep.get_return() == 3.0


def test_constructor_auto_lookback_makes_all_data_lookback() -> None:
    ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[1.0, 2.0], len_lookback_buffer="auto")
    assert len(ep) == 0 and ep.len_lookback_buffer == 2
    assert ep.get_rewards(slice(-2, None)) == [1.0, 2.0]
    assert ep.get_return() == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"observations": [0, 1], "actions": [0, 1], "rewards": [0, 1]}, "'actions' must hold one item fewer"),
        ({"observations": [0, 1], "actions": [0], "rewards": []}, "'rewards' must hold one item per action"),
        ({"observations": [0, 1], "actions": [0], "rewards": [0], "infos": [{}]}, "'infos' must hold one item"),
        (
            {"observations": [0, 1], "actions": [0], "rewards": [0], "extra_model_outputs": {"x": []}},
            r"'extra_model_outputs\['x'\]' must hold one item per action",
        ),
        (
            {"observations": [0, 1], "actions": [0], "rewards": [0], "len_lookback_buffer": -1},
            r"'len_lookback_buffer' must be 'auto' or an int >= 0 \(got -1\)",
        ),
        (
            {"observations": [0, 1], "actions": [0], "rewards": [0], "len_lookback_buffer": "all"},
            "'len_lookback_buffer' must be 'auto'",
        ),
        ({"t_started": -1}, "'t_started' must be None or an int >= 0"),
        ({"terminated": True}, "an episode without data cannot be done"),
    ],
    ids=["actions", "rewards", "infos", "extra", "lookback_range", "lookback_str", "t_started", "done_empty"],
)
def test_constructor_rejects_inconsistent_data(kwargs: dict, match: str) -> None:
    with pytest.raises(EpisodeError, match=match):
        SingleAgentEpisode(**kwargs)


def test_constructor_accepts_arrays_and_becomes_numpy() -> None:
    ep = SingleAgentEpisode(observations=np.arange(4), actions=np.arange(3), rewards=np.ones(3), t_started=7)
    assert ep.is_numpy and len(ep) == 3 and ep.t == 10
    assert ep.get_observations(slice(1, 3)).tolist() == [1, 2]


# ------------------------------------------------------------------ growth
def test_add_env_step_grows_lists_and_sets_flags() -> None:
    ep = counting_episode(5, episode_len=5)
    assert len(ep) == 5 and ep.t == 5
    assert obs_values(ep) == [0, 1, 2, 3, 4, 5]
    assert ep.get_rewards() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert ep.get_infos(-1) == {"t": 5}
    assert ep.get_extra_model_outputs("vf_preds") == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert ep.is_terminated and not ep.is_truncated and ep.is_done


def test_add_env_step_after_done_raises() -> None:
    ep = counting_episode(5, episode_len=5)
    with pytest.raises(EpisodeError, match="is done"):
        ep.add_env_step(np.array([6]), 0, 6.0)
    assert len(ep) == 5


def test_add_env_step_before_reset_raises() -> None:
    with pytest.raises(EpisodeError, match="call add_env_reset first"):
        SingleAgentEpisode().add_env_step(1, 0, 0.0)


def test_add_env_reset_twice_raises() -> None:
    ep = SingleAgentEpisode()
    ep.add_env_reset(0)
    with pytest.raises(EpisodeError, match="already holds observations"):
        ep.add_env_reset(0)


def test_extra_model_outputs_keys_must_stay_the_same() -> None:
    ep = counting_episode(2)
    with pytest.raises(EpisodeError, match="same keys every step"):
        ep.add_env_step(np.array([3]), 0, 3.0, extra_model_outputs={"other": 1.0})
    with pytest.raises(EpisodeError, match="must hold the keys"):
        ep.add_env_step(np.array([3]), 0, 3.0)
    assert len(ep) == 2 and len(ep.get_observations()) == 3


def test_add_env_step_on_numpy_episode_appends() -> None:
    ep = counting_episode(3).to_numpy()
    ep.add_env_step(np.array([4]), 1, 4.0, extra_model_outputs={"vf_preds": 9.0})
    assert ep.is_numpy and len(ep) == 4
    assert ep.get_observations().reshape(-1).tolist() == [0, 1, 2, 3, 4]
    assert ep.get_extra_model_outputs("vf_preds").tolist() == [0.0, 0.5, 1.0, 9.0]


def test_unknown_extra_model_output_key_raises() -> None:
    with pytest.raises(KeyError, match="no extra model output 'logp'"):
        counting_episode(2).get_extra_model_outputs("logp")


# ------------------------------------------------------------------ cut
@pytest.mark.parametrize("h", [0, 1, 3, 8])
def test_cut_keeps_last_h_steps_in_lookback(h: int) -> None:
    ep = counting_episode(6)
    cont = ep.cut(len_lookback_buffer=h)
    assert cont.id_ == ep.id_ and len(cont) == 0 and cont.t_started == 6
    kept = min(h, 6)
    assert cont.len_lookback_buffer == kept
    assert obs_values(cont, slice(-kept - 1, None)) == list(range(6 - kept, 7))
    assert cont.get_actions(slice(-kept, None)) == ep.get_actions(slice(6 - kept, 6))
    assert cont.get_rewards(slice(-kept, None)) == [float(t) for t in range(7 - kept, 7)]
    assert cont.get_extra_model_outputs("vf_preds", slice(-kept, None)) == [0.5 * t for t in range(6 - kept, 6)]
    assert cont.get_return() == 0.0
    with pytest.raises(IndexError):
        cont.get_observations(-kept - 2)


def test_cut_continuation_grows_and_joins_back() -> None:
    env = CountingEnv(100)
    ep = SingleAgentEpisode()
    ep.add_env_reset(*env.reset())
    for _ in range(3):
        obs, r, te, tr, info = env.step(0)
        ep.add_env_step(obs, 0, r, info, terminated=te, truncated=tr)
    cont = ep.cut(len_lookback_buffer=2)
    for _ in range(2):
        obs, r, te, tr, info = env.step(1)
        cont.add_env_step(obs, 1, r, info, terminated=te, truncated=tr)
    assert len(cont) == 2 and cont.t == 5
    assert obs_values(cont, slice(-5, None)) == [1, 2, 3, 4, 5]
    ep.concat_episode(cont)
    assert obs_values(ep) == [0, 1, 2, 3, 4, 5] and ep.get_actions() == [0, 0, 0, 1, 1]


def test_cut_of_numpy_episode_copies_only_the_tail() -> None:
    ep = episode_from_space(SPACES["box_f32_3"], SPACES["discrete"], 50).to_numpy()
    cont = ep.cut(len_lookback_buffer=2)
    assert not cont.is_numpy and cont.observations.num_total() == 3
    tail = cont.get_observations(-1)
    assert not np.shares_memory(tail, ep.observations.data)
    np.testing.assert_array_equal(tail, ep.get_observations(-1))


def test_cut_of_done_episode_raises() -> None:
    with pytest.raises(EpisodeError, match="is done"):
        counting_episode(5, episode_len=5).cut()


# ------------------------------------------------------------------ slice
def test_slice_takes_steps_and_their_observations() -> None:
    ep = counting_episode(6)
    part = ep[2:5]
    assert len(part) == 3 and part.t_started == 2 and part.id_ == ep.id_
    assert obs_values(part) == [2, 3, 4, 5]
    assert part.get_actions() == [0, 1, 0]
    assert part.len_lookback_buffer == 0


def test_slice_lookback_comes_from_data_before_the_start() -> None:
    ep = counting_episode(6)
    part = ep.slice(slice(3, 5), len_lookback_buffer=2)
    assert part.len_lookback_buffer == 2
    assert obs_values(part, slice(-5, None)) == [1, 2, 3, 4, 5]
    assert part.get_rewards(-1, neg_index_as_lookback=True) == 3.0
    clipped = ep.slice(slice(1, 2), len_lookback_buffer=5)
    assert clipped.len_lookback_buffer == 1


def test_slice_reaching_the_end_keeps_terminated() -> None:
    ep = counting_episode(5, episode_len=5)
    assert ep[2:].is_terminated and ep[2:5].is_terminated
    assert not ep[2:4].is_terminated and not ep[2:4].is_done


def test_slice_of_numpy_episode_stays_numpy() -> None:
    ep = counting_episode(6).to_numpy()
    part = ep[1:3]
    assert part.is_numpy and part.get_observations().reshape(-1).tolist() == [1, 2, 3]


def test_slice_rejects_steps_and_items() -> None:
    ep = counting_episode(4)
    with pytest.raises(ValueError, match="step 1"):
        ep[::2]
    with pytest.raises(TypeError, match="takes a slice"):
        ep[1]  # type: ignore[index]


# ------------------------------------------------------------------ concat
def test_concat_checks_id_t_and_boundary_observation() -> None:
    ep = counting_episode(4)
    cont = ep.cut()
    other = SingleAgentEpisode(observations=[np.array([4])], t_started=4)
    with pytest.raises(EpisodeError, match="'id_' differs"):
        ep.concat_episode(other)
    late = SingleAgentEpisode(ep.id_, observations=[np.array([4])], t_started=5)
    with pytest.raises(EpisodeError, match="must equal this chunk's t=4"):
        ep.concat_episode(late)
    wrong_obs = SingleAgentEpisode(
        ep.id_,
        observations=[np.array([99]), np.array([5])],
        actions=[0],
        rewards=[5.0],
        extra_model_outputs={"vf_preds": [0.0]},
        t_started=4,
    )
    with pytest.raises(EpisodeError, match="first observation differs"):
        ep.concat_episode(wrong_obs)
    no_extra = SingleAgentEpisode(ep.id_, observations=[np.array([4])], t_started=4)
    with pytest.raises(EpisodeError, match="keys differ"):
        ep.concat_episode(no_extra)
    assert len(ep) == 4
    ep.concat_episode(cont)
    assert len(ep) == 4


def test_concat_onto_done_episode_raises() -> None:
    ep = counting_episode(5, episode_len=5)
    with pytest.raises(EpisodeError, match="is done"):
        ep.concat_episode(SingleAgentEpisode(ep.id_, observations=[np.array([5])], t_started=5))


def test_concat_mixed_forms() -> None:
    ep = counting_episode(3)
    cont = ep.cut(2)
    for t in range(3, 6):
        cont.add_env_step(
            np.array([t + 1]), t % 2, float(t + 1), {"t": t + 1}, extra_model_outputs={"vf_preds": 0.5 * t}
        )
    whole = counting_episode(6)
    whole.id_ = ep.id_
    ep.to_numpy()
    ep.concat_episode(cont)
    assert_episodes_equal(ep, whole)


# ------------------------------------------------------------------ differential: chunks joined == whole
def _collect_cartpole(num_steps: int, seed: int, cut_every: int | None, h: int) -> list[SingleAgentEpisode]:
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
    out, ep = [], SingleAgentEpisode(**spaces)
    ep.add_env_reset(*env.reset(seed=seed))
    for t in range(1, num_steps + 1):
        a = env.action_space.sample()
        obs, r, te, tr, info = env.step(a)
        ep.add_env_step(obs, a, r, info, terminated=te, truncated=tr, extra_model_outputs={"action_logp": -0.7})
        if ep.is_done:
            out.append(ep)
            ep = SingleAgentEpisode(**spaces)
            ep.add_env_reset(*env.reset())
        elif cut_every and t % cut_every == 0:
            out.append(ep)
            ep = ep.cut(len_lookback_buffer=h)
    out.append(ep)
    return out


@pytest.mark.parametrize("k", [1, 3, 7, 25])
@pytest.mark.parametrize("h", [0, 1, 4])
@pytest.mark.parametrize("numpy_chunks", [False, True], ids=["list", "numpy"])
def test_chunks_joined_equal_whole_episode_on_cartpole(k: int, h: int, numpy_chunks: bool) -> None:
    whole = _collect_cartpole(300, seed=11, cut_every=None, h=h)
    chunks = _collect_cartpole(300, seed=11, cut_every=k, h=h)
    joined: dict[str, SingleAgentEpisode] = {}
    previous: dict[str, SingleAgentEpisode] = {}
    for chunk in chunks:
        if chunk.id_ in previous:
            # Each continuation's lookback is the previous chunk's tail.
            prev, lb = previous[chunk.id_], chunk.len_lookback_buffer
            assert lb == min(h, prev.len_lookback_buffer + len(prev))
            if lb:
                np.testing.assert_array_equal(
                    np.asarray(chunk.get_observations(slice(-lb, 1), neg_index_as_lookback=True)),
                    np.asarray(prev.get_observations(slice(-lb - 1, None))),
                )
                lookback_actions = chunk.get_actions(slice(-lb, 0), neg_index_as_lookback=True)
                assert list(lookback_actions) == list(prev.get_actions(slice(-lb, None)))
        previous[chunk.id_] = chunk
        piece = SingleAgentEpisode.from_state(chunk.get_state())
        if numpy_chunks:
            piece.to_numpy()
        if chunk.id_ in joined:
            joined[chunk.id_].concat_episode(piece)
        else:
            joined[chunk.id_] = piece
    assert len(joined) == len(whole)
    assert sum(len(c) for c in chunks) == sum(len(e) for e in whole) == 300
    # Episode ids are random, so whole and joined episodes are matched by order.
    for w, j in zip(whole, joined.values(), strict=True):
        w.id_ = j.id_
        assert_episodes_equal(j, w)


# ------------------------------------------------------------------ numpy form over the space catalogue
@pytest.mark.parametrize("name", list(SPACES), ids=list(SPACES))
def test_to_numpy_gives_leading_time_axis(name: str) -> None:
    space = SPACES[name]
    ep = episode_from_space(space, space, 4)
    obs_items, action_items = ep.get_observations(), ep.get_actions()
    ep.to_numpy()
    assert ep.is_numpy
    assert all(leaf.shape[0] == 5 for leaf in tree.flatten(ep.get_observations()))
    assert all(leaf.shape[0] == 4 for leaf in tree.flatten(ep.get_actions()))
    for i, item in enumerate(obs_items):
        assert _same(ep.get_observations(i), item)
    for i, item in enumerate(action_items):
        assert _same(ep.get_actions(i), item)


def _same(a: object, b: object) -> bool:
    return tree.spec_of(a) == tree.spec_of(b) and all(
        np.array_equal(x, y) for x, y in zip(tree.flatten(a), tree.flatten(b), strict=True)
    )


@pytest.mark.parametrize("name", list(SPACES), ids=list(SPACES))
def test_list_and_numpy_forms_hold_equal_data(name: str) -> None:
    space = SPACES[name]
    ep = episode_from_space(space, SPACES["discrete"], 6)
    chunk = ep.cut(3)
    chunk.add_env_step(
        space.sample(), 1, 0.0, extra_model_outputs={"action_logp": np.float32(0), "vf_preds": np.float32(0)}
    )
    numpy_chunk = SingleAgentEpisode.from_state(chunk.get_state()).to_numpy()
    assert_episodes_equal(chunk, numpy_chunk)
    assert numpy_chunk.len_lookback_buffer == 3 and len(numpy_chunk) == 1


# ------------------------------------------------------------------ state and return
@pytest.mark.parametrize("form", ["list", "numpy"])
def test_state_round_trip(form: str) -> None:
    ep = counting_episode(5).cut(2)
    ep.add_env_step(np.array([6]), 1, 6.0, {"t": 6}, truncated=True, extra_model_outputs={"vf_preds": 1.0})
    if form == "numpy":
        ep.to_numpy()
    back = SingleAgentEpisode.from_state(ep.get_state())
    assert back.is_truncated and back.t_started == 5 and back.len_lookback_buffer == 2
    assert back.is_numpy == (form == "numpy")
    assert_episodes_equal(back, ep)
    assert full_state(back)["infos"] == [{"t": 3}, {"t": 4}, {"t": 5}, {"t": 6}]


def test_return_excludes_lookback() -> None:
    ep = counting_episode(4)
    cont = ep.cut(3)
    cont.add_env_step(np.array([5]), 0, 5.0, extra_model_outputs={"vf_preds": 0.0})
    assert ep.get_return() == 10.0 and cont.get_return() == 5.0
    assert len(cont) == 1


def test_repr_names_the_key_facts() -> None:
    text = repr(counting_episode(2))
    assert "len=2" in text and "lookback=0" in text and "numpy=False" in text


def test_concat_onto_a_chunk_without_actions_adopts_model_output_keys() -> None:
    # A sub-env reset just before sample() returned: its chunk has no steps and no model outputs yet.
    a = SingleAgentEpisode()
    a.add_env_reset(0)
    c = a.cut()
    c.add_env_step(1, 0, 1.0, extra_model_outputs={"action_logp": -0.1})
    a.concat_episode(c)
    assert len(a) == 1 and a.get_extra_model_outputs("action_logp") == [-0.1]


@pytest.mark.parametrize("bad", [True, -1, 1.0], ids=repr)
def test_cut_and_slice_refuse_a_bad_lookback_length(bad: object) -> None:
    ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[0.0, 1.0])
    message = re.escape(f"'len_lookback_buffer' must be an int >= 0 (got {bad!r})")
    with pytest.raises(EpisodeError, match=message):
        ep.cut(len_lookback_buffer=bad)  # type: ignore[arg-type]
    with pytest.raises(EpisodeError, match=message):
        ep.slice(slice(1, 2), len_lookback_buffer=bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ RLlib's constructor rules
class TestRLlibConstructor:
    def test_t_started_none_counts_the_lookback_steps_as_before_the_chunk(self) -> None:
        ep = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[0, 1, 2], rewards=[0.0] * 3, len_lookback_buffer=2)
        assert (ep.t_started, len(ep), ep.t) == (2, 1, 3)
        auto = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[0.0] * 2, len_lookback_buffer="auto")
        assert (auto.t_started, len(auto)) == (2, 0)
        assert SingleAgentEpisode().t_started == 0

    def test_a_given_t_started_is_kept(self) -> None:
        ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0], len_lookback_buffer=1, t_started=9)
        assert (ep.t_started, ep.t) == (9, 9)

    def test_a_lookback_longer_than_the_data_is_clipped(self) -> None:
        ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[0.0, 1.0], len_lookback_buffer=10)
        assert (ep.len_lookback_buffer, len(ep), ep.t_started) == (2, 0, 2)
        assert ep.get_rewards(slice(-2, None)) == [0.0, 1.0]


class TestValidate:
    def test_a_consistent_episode_validates(self) -> None:
        ep = counting_episode(4)
        ep.validate()
        ep.cut(len_lookback_buffer=2).validate()
        ep.to_numpy().validate()
        SingleAgentEpisode().validate()

    def test_a_buffer_grown_by_hand_is_reported(self) -> None:
        ep = counting_episode(3)
        ep.actions.append(9)
        with pytest.raises(EpisodeError, match="validate: 'rewards' holds 3 items with lookback 0; expected 4"):
            ep.validate()

    def test_a_lookback_changed_by_hand_is_reported(self) -> None:
        ep = counting_episode(3)
        ep.rewards.lookback = 1
        with pytest.raises(
            EpisodeError, match="validate: 'rewards' holds 3 items with lookback 1; expected 3 with lookback 0"
        ):
            ep.validate()


class TestStateKeepsCustomDataAndClock:
    def test_get_state_from_state_round_trip(self) -> None:
        ep = counting_episode(3)
        ep.custom_data["k"] = [1]
        back = SingleAgentEpisode.from_state(ep.get_state())
        assert back.custom_data == {"k": [1]}
        assert back.get_duration_s() == pytest.approx(ep.get_duration_s(), abs=1.0)
        assert back.get_duration_s() > 0.0

    def test_a_state_from_before_custom_data_loads_without_it(self) -> None:
        state = counting_episode(2).get_state()
        for key in ("custom_data", "start_time", "last_step_time"):
            del state[key]
        back = SingleAgentEpisode.from_state(state)
        assert (back.custom_data, back.get_duration_s()) == ({}, 0.0)


class TestShapesThatDoNotStack:
    """numpy's "inhomogeneous shape" ValueError becomes an EpisodeError naming the field and item."""

    @staticmethod
    def _ragged() -> SingleAgentEpisode:
        ep = SingleAgentEpisode(observation_space=gym.spaces.Box(-1.0, 1.0, (2,)))
        ep.add_env_reset(np.zeros(2, np.float32))
        ep.add_env_step(np.zeros(2, np.float32), 0, 1.0)
        ep.add_env_step(np.zeros(3, np.float32), 1, 1.0)
        return ep

    def test_to_numpy_names_the_field_and_the_item(self) -> None:
        with pytest.raises(EpisodeError) as raised:
            self._ragged().to_numpy()
        assert str(raised.value) == (
            "to_numpy: observations item 2 (the lookback's 0 items counted first) has shape (3,) where the first "
            "has shape (2,); every item of a field must have its space's shape"
        )

    def test_a_failed_to_numpy_leaves_the_episode_as_it_was(self) -> None:
        """The observations convert, then the actions fail: the observations go back to list form."""
        ep = SingleAgentEpisode()
        ep.add_env_reset(np.zeros(2, np.float32))
        ep.add_env_step(np.zeros(2, np.float32), np.zeros(2), 1.0)
        ep.add_env_step(np.ones(2, np.float32), np.zeros(3), 1.0)
        with pytest.raises(EpisodeError, match=r"^to_numpy: actions item 1 \(the lookback's 0 items counted first\) "):
            ep.to_numpy()
        assert not ep.is_numpy
        ep.add_env_step(np.full(2, 2.0, np.float32), np.zeros(2), 1.0)
        assert [o.tolist() for o in ep.get_observations()] == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
