"""ColumnarEpisodes: lossless packing of chunks (lookback kept apart), sparse infos, validation, size."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import DataFormatError
from tests.helpers import SPACES, assert_episodes_equal, episode_from_space


def chunk_catalogue(space: gym.Space, *, seed: int = 0) -> list[SingleAgentEpisode]:
    """Chunks of several kinds: plain, continuations with lookback (one of length 0),
    a terminated one, and a numpy'd one."""
    first = episode_from_space(space, space, 5, seed=seed)
    second = first.cut(3)
    for t in range(4):
        second.add_env_step(
            space.sample(),
            space.sample(),
            float(t),
            {"k": [t, "x"]} if t == 2 else None,
            extra_model_outputs={"action_logp": np.float32(t), "vf_preds": np.float32(-t)},
        )
    third = second.cut(2)  # length 0, lookback 2
    done = episode_from_space(space, space, 3, seed=seed + 7, terminated=True)
    numpy_one = episode_from_space(space, space, 4, seed=seed + 9).to_numpy()
    return [first, second, third, done, numpy_one]


@pytest.mark.parametrize("name", list(SPACES), ids=list(SPACES))
def test_pack_unpack_round_trip_over_spaces(name: str) -> None:
    chunks = chunk_catalogue(SPACES[name])
    col = episodes_to_columnar(chunks)
    back = columnar_to_episodes(col)
    assert len(back) == len(chunks)
    for original, restored in zip(chunks, back, strict=True):
        assert restored.is_numpy
        assert_episodes_equal(restored, original)


def test_lookback_is_kept_apart_and_never_counted() -> None:
    chunks = chunk_catalogue(SPACES["box_f32_3"])
    col = episodes_to_columnar(chunks)
    assert col.lens.tolist() == [5, 4, 0, 3, 4]
    assert col.lookback_lens.tolist() == [0, 3, 2, 0, 0]
    assert col.num_env_steps == 16
    assert len(col.data.rewards) == 16 and len(col.lookback.rewards) == 5
    assert len(col.data.observations) == 16 + 5 and len(col.lookback.observations) == 5
    assert col.obs_offsets.tolist() == [0, 6, 11, 12, 16, 21]
    assert col.step_offsets.tolist() == [0, 5, 9, 9, 12, 16]
    assert col.lookback_offsets.tolist() == [0, 0, 3, 5, 5, 5]
    # The continuation's lookback rows are the previous chunk's last steps.
    np.testing.assert_array_equal(col.lookback.rewards[:3], col.data.rewards[2:5])
    np.testing.assert_array_equal(col.lookback.observations[:3], col.data.observations[2:5])


def test_infos_are_sparse() -> None:
    chunks = chunk_catalogue(SPACES["discrete"])
    col = episodes_to_columnar(chunks)
    non_empty = [info for ep in chunks for info in ep.infos.data[ep.len_lookback_buffer :] if info]
    assert col.data.info_values == non_empty
    assert len(col.data.info_rows) == len(non_empty) < col.num_env_steps
    lookback = [info for ep in chunks for info in ep.infos.data[: ep.len_lookback_buffer]]
    assert col.lookback.info_values == [info for info in lookback if info] == [{"t": 3}, {"k": [2, "x"]}]
    assert col.lookback.info_rows.tolist() == [i for i, info in enumerate(lookback) if info] == [2, 4]


def test_chunks_with_ids_times_and_flags() -> None:
    chunks = chunk_catalogue(SPACES["discrete"])
    col = episodes_to_columnar(chunks)
    assert col.ids == [ep.id_ for ep in chunks]
    assert col.t_started.tolist() == [0, 5, 9, 0, 0]
    assert col.terminated.tolist() == [False, False, False, True, False]
    assert not col.truncated.any()


def test_bytes_shipped_per_step_stay_close_to_raw() -> None:
    # 20 CartPole-shaped episodes of 200 steps: obs float32[4], int64 action, float64 reward.
    space = gym.spaces.Box(-1, 1, (4,), np.float32)
    episodes = [episode_from_space(space, gym.spaces.Discrete(2), 200, seed=s, extra=False) for s in range(20)]
    for ep in episodes:
        ep.infos.data[:] = [{}] * len(ep.infos.data)
    col = episodes_to_columnar(episodes)
    assert col.raw_step_nbytes() == 16 + 8 + 8 + 2
    assert col.serialized_nbytes() / col.num_env_steps <= 1.1 * col.raw_step_nbytes()


def test_empty_list_raises() -> None:
    with pytest.raises(DataFormatError, match="at least one episode"):
        episodes_to_columnar([])


def test_episode_without_observations_raises() -> None:
    with pytest.raises(DataFormatError, match=r"'episodes\[1\]'.*no observations"):
        episodes_to_columnar([episode_from_space(SPACES["discrete"], SPACES["discrete"], 2), SingleAgentEpisode()])


def test_mismatched_extra_keys_raise() -> None:
    a = episode_from_space(SPACES["discrete"], SPACES["discrete"], 2)
    b = episode_from_space(SPACES["discrete"], SPACES["discrete"], 2, extra=False)
    with pytest.raises(DataFormatError, match="extra_model_outputs keys"):
        episodes_to_columnar([a, b])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda c: {"data": dataclasses.replace(c.data, actions=c.data.actions[:-1])}, "'actions' must hold"),
        (lambda c: {"lens": c.lens[:-1]}, "'lens' must be an array of shape"),
        (
            lambda c: {"lookback": dataclasses.replace(c.lookback, observations=c.lookback.observations[1:])},
            "'lookback observations' must hold",
        ),
        (
            lambda c: {"data": dataclasses.replace(c.data, info_rows=c.data.info_rows[::-1].copy())},
            "'info_rows' must be increasing",
        ),
        (
            lambda c: {"data": dataclasses.replace(c.data, info_values=c.data.info_values[:-1])},
            "must be equally long",
        ),
        (lambda c: {"lookback": dataclasses.replace(c.lookback, extra_model_outputs={})}, "must have the same keys"),
    ],
    ids=["actions_rows", "lens_shape", "lookback_rows", "info_order", "info_len", "extra_keys"],
)
def test_validate_rejects_inconsistent_objects(change: object, match: str) -> None:
    col = episodes_to_columnar(chunk_catalogue(SPACES["discrete"]))
    bad = dataclasses.replace(col, **change(col))  # type: ignore[operator]
    with pytest.raises(DataFormatError, match=match):
        columnar_to_episodes(bad)


def test_columnar_object_is_one_payload_of_arrays() -> None:
    col = episodes_to_columnar(chunk_catalogue(SPACES["dict"]))
    assert isinstance(col, ColumnarEpisodes)
    assert isinstance(col.data.observations["pos"], np.ndarray) and col.data.observations["pos"].shape == (21, 2)
    assert isinstance(col.data.rewards, np.ndarray) and col.data.rewards.dtype == np.float64


# ------------------------------------------------------------------ regressions from review (dtypes, empty sides, keys)
def _float32_episode(obs_space: gym.Space | None = None, action_space: gym.Space | None = None) -> SingleAgentEpisode:
    ep = SingleAgentEpisode(observation_space=obs_space, action_space=action_space)
    ep.add_env_reset(np.zeros(2, np.uint8))
    for i in range(3):
        ep.add_env_step(
            np.full(2, i, np.uint8),
            np.array([i, -i], np.int32),
            np.float32(1.5),
            extra_model_outputs={"logp": np.float32(-0.5), "state": {"h": np.ones(3, np.float16)}},
        )
    return ep


@pytest.mark.parametrize("with_spaces", [False, True], ids=["no_spaces", "spaces"])
@pytest.mark.parametrize("kind", ["no_lookback", "only_continuations"])
def test_unpack_keeps_dtypes_and_shapes_when_one_side_is_empty(with_spaces: bool, kind: str) -> None:
    spaces = (
        (gym.spaces.Box(0, 9, (2,), np.uint8), gym.spaces.Box(-9, 9, (2,), np.int32)) if with_spaces else (None, None)
    )
    ep = _float32_episode(*spaces)
    chunks = [ep.to_numpy()] if kind == "no_lookback" else [ep.cut(2)]
    (back,) = columnar_to_episodes(episodes_to_columnar(chunks))
    assert_episodes_equal(back, chunks[0])
    assert back.rewards.data.dtype == np.float32


def test_chunk_without_actions_packs_with_keyed_chunks() -> None:
    fresh = SingleAgentEpisode()
    fresh.add_env_reset(0)
    keyed = SingleAgentEpisode()
    keyed.add_env_reset(0)
    keyed.add_env_step(1, 0, 1.0, extra_model_outputs={"action_logp": -0.1})
    col = episodes_to_columnar([keyed, fresh])
    assert col.lens.tolist() == [1, 0] and list(col.data.extra_model_outputs) == ["action_logp"]
    back = columnar_to_episodes(col)
    assert back[1].get_observations().tolist() == [0]


def test_text_space_chunks_pack() -> None:
    space = gym.spaces.Text(5)
    ep = SingleAgentEpisode(observations=["ab", "cd"], actions=[0], rewards=[1.0], observation_space=space)
    (back,) = columnar_to_episodes(episodes_to_columnar([ep]))
    assert back.get_observations().tolist() == ["ab", "cd"]
    empty = SingleAgentEpisode(observation_space=space)
    assert empty.get_observations(0, fill="x") == "x"


def test_custom_data_travels_with_its_chunk() -> None:
    from ray_sampler.data.columnar import concat_columnar

    a, b, c = (SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0]) for _ in range(3))
    a.custom_data["k"] = 1
    c.custom_data["k"] = [3]
    first, second = episodes_to_columnar([a, b]), episodes_to_columnar([c])
    assert first.custom_data == {0: {"k": 1}}
    joined = concat_columnar([first, second])
    assert joined.custom_data == {0: {"k": 1}, 2: {"k": [3]}}
    assert [ep.custom_data for ep in columnar_to_episodes(joined)] == [{"k": 1}, {}, {"k": [3]}]


def test_custom_data_outside_the_chunks_is_refused() -> None:
    col = episodes_to_columnar([SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0])])
    with pytest.raises(DataFormatError, match=r"'custom_data' must map chunk indices in \[0, 1\) to dicts"):
        dataclasses.replace(col, custom_data={1: {}}).validate()


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ("abc", r"^'episodes' must be a list of SingleAgentEpisode \(got str\)$"),
        (["abc"], r"^'episodes\[0\]' must be a SingleAgentEpisode \(got str: 'abc'\)$"),
        (
            [SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[1.0]), 7],
            r"^'episodes\[1\]' must be a SingleAgentEpisode \(got int: 7\)$",
        ),
    ],
    ids=["not-a-list", "a-string", "an-int-among-episodes"],
)
def test_what_is_not_an_episode_is_refused_by_position(given: object, match: str) -> None:
    """Before: AttributeError: 'str' object has no attribute 'actions'."""
    with pytest.raises(DataFormatError, match=match):
        episodes_to_columnar(given)  # type: ignore[arg-type]


def _chunk(obs_size: int, *, ragged_at: int | None = None) -> SingleAgentEpisode:
    ep = SingleAgentEpisode()
    ep.add_env_reset(np.zeros(obs_size, np.float32))
    for t in range(1, 4):
        ep.add_env_step(np.zeros(obs_size + (t == ragged_at), np.float32), 0, 1.0)
    return ep


def test_an_item_of_another_shape_within_a_chunk_is_named() -> None:
    with pytest.raises(DataFormatError) as raised:
        episodes_to_columnar([_chunk(2), _chunk(2, ragged_at=2)])
    assert str(raised.value) == (
        "episodes_to_columnar: 'episodes[1]' observations item 2 (lookback counted first) has shape (3,) where "
        "the first has shape (2,); every item of a field must have its space's shape"
    )


def test_chunks_whose_items_differ_are_named() -> None:
    with pytest.raises(DataFormatError) as raised:
        episodes_to_columnar([_chunk(2), _chunk(2).to_numpy(), _chunk(4).to_numpy()])
    assert str(raised.value) == (
        "episodes_to_columnar: 'episodes[2]' observations have shape (4,) where episodes[0] has shape (2,); every "
        "item of a field must have its space's shape"
    )
