"""StoredColumns: appends and gathers, sparse infos, mark/rollback, keep (compaction), and the
ColumnarEpisodes / episode chunks built back from stored rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.columns import EpisodeMeta, StoredColumns
from tests.helpers import SPACES, assert_episodes_equal, episode_from_space
from tests.replay.test_storage import episode


def counted_episode(
    id_: str, steps: int, *, start: int = 0, lookback: int = 0, infos_at: tuple[int, ...] = ()
) -> SingleAgentEpisode:
    """``episode`` (obs t, action t % 2, reward t + 1, logp -t) with info ``{"t": t}`` at the
    global timesteps ``infos_at`` (lookback included)."""
    ep = episode(id_, steps, start=start, lookback=lookback)
    ts = range(start - lookback, start + steps + 1)
    return SingleAgentEpisode(
        id_,
        observations=ep.observations.data,
        actions=ep.actions.data,
        rewards=ep.rewards.data,
        infos=[{"t": t} if t in infos_at else {} for t in ts],
        extra_model_outputs={"logp": ep.extra_model_outputs["logp"].data},
        t_started=start,
        len_lookback_buffer=lookback,
    )


def counted(id_: str, steps: int, *, start: int = 0, lookback: int = 0, infos_at: tuple[int, ...] = ()) -> Any:
    """``counted_episode`` as a ColumnarEpisodes."""
    return episodes_to_columnar([counted_episode(id_, steps, start=start, lookback=lookback, infos_at=infos_at)])


def meta_of(col: ColumnarEpisodes) -> EpisodeMeta:
    return EpisodeMeta(
        ids=list(col.ids),
        t_started=col.t_started,
        lens=col.lens,
        lookback_lens=col.lookback_lens,
        terminated=col.terminated,
        truncated=col.truncated,
    )


def stored(col: ColumnarEpisodes) -> StoredColumns:
    """Columns holding ``col``'s data rows and all of its lookback rows."""
    columns = StoredColumns()
    columns.append(col)
    columns.append_lookback(col, np.arange(int(col.lookback_lens.sum())))
    return columns


def everything(columns: StoredColumns, col: ColumnarEpisodes) -> ColumnarEpisodes:
    """``columns`` read back as ``col``'s chunks (every data and lookback row, in order)."""
    return columns.to_columnar(
        meta_of(col),
        np.arange(columns.num_obs_rows),
        np.arange(columns.num_step_rows),
        np.arange(int(col.lookback_lens.sum())),
    )


def snapshot(columns: StoredColumns) -> dict[str, Any]:
    """Everything the columns hold, read through their read API."""
    obs, steps = np.arange(columns.num_obs_rows), np.arange(columns.num_step_rows)
    return {
        "rows": (columns.num_obs_rows, columns.num_step_rows),
        "observations": columns.gather_observations(obs).tolist() if len(obs) else [],
        "actions": columns.gather_actions(steps).tolist() if len(steps) else [],
        "rewards": columns.rewards_at(steps).tolist() if len(steps) else [],
        "extras": {k: v.tolist() for k, v in columns.gather_extra_model_outputs(steps).items()},
        "infos": dict(columns.infos),
        "lb_infos": dict(columns.lb_infos),
        "step_nbytes": columns.step_nbytes(),
        "nbytes": columns.nbytes(),
    }


class TestAppendAndGather:
    def test_append_returns_the_first_new_observation_and_step_rows(self) -> None:
        columns = StoredColumns()
        assert columns.append(counted("a", 2)) == (0, 0)
        assert columns.append(counted("b", 3, start=4)) == (3, 2)
        assert (columns.num_obs_rows, columns.num_step_rows) == (7, 5)

    def test_gathers_read_the_appended_rows_back(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        columns.append(counted("b", 3, start=4))
        assert columns.gather_observations(np.arange(7))[:, 0].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 7.0]
        assert columns.gather_actions(np.arange(5)).tolist() == [0, 1, 0, 1, 0]
        assert columns.rewards_at(np.array([4, 0, 2])).tolist() == [7.0, 1.0, 5.0]
        logp = columns.gather_extra_model_outputs(np.array([1, 3]))
        assert list(logp) == ["logp"] and logp["logp"].tolist() == [-1.0, -5.0]

    def test_only_non_empty_infos_are_kept_keyed_by_observation_row(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2, infos_at=(1,)))
        columns.append(counted("b", 3, start=4, infos_at=(4, 7)))
        assert columns.infos == {1: {"t": 1}, 3: {"t": 4}, 6: {"t": 7}}

    def test_append_lookback_stores_the_chosen_rows_and_their_infos(self) -> None:
        col = episodes_to_columnar(
            [
                counted_episode("a", 1, start=2, lookback=2, infos_at=(0,)),
                counted_episode("b", 1, start=9, lookback=2, infos_at=(8,)),
            ]
        )
        columns = StoredColumns()
        first = counted("x", 1, start=1, lookback=1, infos_at=(0,))
        columns.append(first)
        columns.append_lookback(first, np.array([0]))
        columns.append(col)
        assert columns.append_lookback(col, np.array([3])) == 1  # b's second lookback row, t = 8
        assert columns.lb_infos == {0: {"t": 0}, 1: {"t": 8}}
        lb = columns.to_columnar(meta_of(col), np.arange(0), np.arange(0), np.array([1])).lookback
        assert (lb.observations.tolist(), lb.actions.tolist(), lb.rewards.tolist()) == ([[8.0]], [0], [9.0])

    def test_step_nbytes_counts_one_step_and_nbytes_the_allocated_rows(self) -> None:
        columns = StoredColumns()
        assert (columns.step_nbytes(), columns.nbytes()) == (0, 0)
        columns.append(counted("a", 2))
        # float32 obs + int64 action + float64 reward + float32 logp; 1024 rows allocated per column.
        assert (columns.step_nbytes(), columns.nbytes()) == (24, 24 * 1024)


class TestChecks:
    def test_other_model_output_keys_are_refused(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        other = episodes_to_columnar([episode("b", 2, logp=False)])
        with pytest.raises(ReplayError, match=r"stored extra_model_outputs keys \['logp'\] \(got \[\]\)"):
            columns.check_keys(other)

    def test_rows_of_another_dtype_are_refused_and_nothing_changes(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        before = snapshot(columns)
        bad = episodes_to_columnar(
            [SingleAgentEpisode("b", observations=[np.float32([0.0]), np.float32([1.0])], actions=[0.5], rewards=[1.0])]
        )
        with pytest.raises(ReplayError, match="'actions' rows must keep the stored structure"):
            columns.check_rows(bad, with_lookback=False)
        assert snapshot(columns) == before


class TestMarkAndRollback:
    def test_rollback_after_a_partial_append_restores_contents_and_row_counts(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2, infos_at=(1,)))
        before = snapshot(columns)
        mark = columns.mark()
        # Float actions do not fit the int column: observations are appended, then actions raise.
        bad = episodes_to_columnar(
            [
                SingleAgentEpisode(
                    "b",
                    observations=[np.float32([5.0]), np.float32([6.0])],
                    actions=[0.5],
                    rewards=[1.0],
                    infos=[{"t": 5}, {}],
                    extra_model_outputs={"logp": [np.float32(0)]},
                )
            ]
        )
        with pytest.raises(ReplayError, match="'actions' rows must keep"):
            columns.append(bad)
        assert columns.num_obs_rows == 5  # the partial append
        columns.rollback(mark)
        assert snapshot(columns) == before

    def test_appends_after_a_rollback_land_where_the_undone_ones_did(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        mark = columns.mark()
        columns.append(counted("b", 3, start=10, infos_at=(10,)))
        columns.rollback(mark)
        assert columns.append(counted("c", 1, start=20)) == (3, 2)
        assert columns.gather_observations(np.arange(5))[:, 0].tolist() == [0.0, 1.0, 2.0, 20.0, 21.0]
        assert columns.infos == {}

    def test_rollback_of_the_first_append_forgets_the_model_output_keys(self) -> None:
        columns = StoredColumns()
        mark = columns.mark()
        columns.append(counted("a", 2))
        columns.rollback(mark)
        assert snapshot(columns) == snapshot(StoredColumns())
        columns.check_keys(episodes_to_columnar([episode("b", 2, logp=False)]))  # any keys fit again

    def test_rollback_drops_appended_lookback_rows_and_their_infos(self) -> None:
        columns = StoredColumns()
        first = counted("a", 2, start=2, lookback=2, infos_at=(0,))
        columns.append(first)
        columns.append_lookback(first, np.arange(2))
        mark = columns.mark()
        later = counted("b", 1, start=3, lookback=3, infos_at=(1,))
        columns.append(later)
        assert columns.append_lookback(later, np.arange(3)) == 2
        columns.rollback(mark)
        assert columns.lb_infos == {0: {"t": 0}}
        assert columns.append_lookback(later, np.arange(3)) == 2

    def test_a_mark_can_be_rolled_back_to_twice(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        before = snapshot(columns)
        mark = columns.mark()
        for start in (10, 20):
            columns.append(counted("b", 2, start=start, infos_at=(start,)))
            columns.rollback(mark)
            assert snapshot(columns) == before


class TestKeep:
    def test_keep_renumbers_rows_from_zero_and_remaps_infos(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2, infos_at=(0, 2)))
        columns.append(counted("b", 3, start=4, infos_at=(5,)))
        columns.keep(np.arange(3, 7), np.arange(2, 5), np.arange(0))
        assert (columns.num_obs_rows, columns.num_step_rows) == (4, 3)
        assert columns.gather_observations(np.arange(4))[:, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
        assert columns.rewards_at(np.arange(3)).tolist() == [5.0, 6.0, 7.0]
        assert columns.gather_extra_model_outputs(np.arange(3))["logp"].tolist() == [-4.0, -5.0, -6.0]
        assert columns.infos == {1: {"t": 5}}

    def test_keep_remaps_lookback_infos_and_rows(self) -> None:
        columns = StoredColumns()
        for id_, start in (("a", 2), ("b", 12)):
            col = counted(id_, 1, start=start, lookback=2, infos_at=(start - 2, start - 1))
            columns.append(col)
            columns.append_lookback(col, np.arange(2))
        columns.keep(np.arange(2, 4), np.arange(1, 2), np.array([3]))
        assert columns.lb_infos == {0: {"t": 11}}
        meta = EpisodeMeta(["b"], np.array([12]), np.array([1]), np.array([1]), np.array([False]), np.array([False]))
        out = columns.to_columnar(meta, np.arange(2), np.arange(1), np.arange(1))
        assert out.lookback.observations[:, 0].tolist() == [11.0] and out.lookback.rewards.tolist() == [12.0]

    def test_appends_after_keep_continue_past_the_kept_rows(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 2))
        columns.append(counted("b", 1, start=5))
        columns.keep(np.arange(3, 5), np.arange(2, 3), np.arange(0))
        assert columns.append(counted("c", 1, start=9)) == (2, 1)
        assert columns.gather_observations(np.arange(4))[:, 0].tolist() == [5.0, 6.0, 9.0, 10.0]


class TestReadingBack:
    @pytest.mark.parametrize("space", list(SPACES.values()), ids=list(SPACES))
    def test_to_columnar_gives_back_the_columnar_episodes_it_was_given(self, space: Any) -> None:
        ep = episode_from_space(space, SPACES["discrete"], 7, seed=3)
        col = episodes_to_columnar([ep.slice(slice(0, 3)), ep.slice(slice(3, 7), len_lookback_buffer=2)])
        for got, want in zip(
            columnar_to_episodes(everything(stored(col), col)), columnar_to_episodes(col), strict=True
        ):
            assert_episodes_equal(got, want)

    def test_to_columnar_keeps_sparse_infos_on_both_sides(self) -> None:
        col = counted("a", 3, start=3, lookback=2, infos_at=(1, 4, 6))
        out = everything(stored(col), col)
        assert (out.data.info_rows.tolist(), out.data.info_values) == ([1, 3], [{"t": 4}, {"t": 6}])
        assert (out.lookback.info_rows.tolist(), out.lookback.info_values) == ([0], [{"t": 1}])

    def test_to_columnar_of_rows_without_stored_lookback_has_an_empty_lookback(self) -> None:
        col = counted("a", 2)
        columns = StoredColumns()
        columns.append(col)
        out = everything(columns, col)
        assert out.lookback.observations.shape == (0, 1) and out.lookback.actions.shape == (0,)
        assert out.lookback.extra_model_outputs["logp"].shape == (0,)
        assert_episodes_equal(columnar_to_episodes(out)[0], columnar_to_episodes(col)[0])

    @pytest.mark.parametrize("space", list(SPACES.values()), ids=list(SPACES))
    def test_chunk_joins_stored_lookback_and_data_rows_into_the_episode(self, space: Any) -> None:
        ep = episode_from_space(space, SPACES["tuple"], 6, seed=5)
        chunk = ep.slice(slice(2, 6), len_lookback_buffer=2)
        col = episodes_to_columnar([chunk])
        got = stored(col).chunk(
            ep.id_,
            t_started=2,
            lb_rows=np.arange(2),
            obs_rows=np.arange(5),
            step_rows=np.arange(4),
            lookback=2,
            terminated=False,
            truncated=False,
        )
        assert_episodes_equal(got, columnar_to_episodes(col)[0])

    def test_chunk_takes_its_lookback_from_data_rows_when_none_is_stored(self) -> None:
        columns = StoredColumns()
        columns.append(counted("a", 4, infos_at=(1, 3)))
        got = columns.chunk(
            "a",
            t_started=2,
            lb_rows=np.arange(0),
            obs_rows=np.arange(1, 5),
            step_rows=np.arange(1, 4),
            lookback=1,
            terminated=True,
            truncated=False,
        )
        want = SingleAgentEpisode(
            "a",
            observations=[np.array([t], np.float32) for t in (1, 2, 3, 4)],
            actions=[1, 0, 1],
            rewards=[2.0, 3.0, 4.0],
            infos=[{"t": 1}, {}, {"t": 3}, {}],
            extra_model_outputs={"logp": [np.float32(-t) for t in (1, 2, 3)]},
            t_started=2,
            len_lookback_buffer=1,
            terminated=True,
        )
        assert_episodes_equal(got, want)
