"""Sequences for stateful modules: plans, state_in across cuts, zero padding, masks and GAE values."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from connectors.learner import (
    AddColumnsFromEpisodesToTrainBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    GeneralAdvantageEstimation,
    add_time_dim,
    loss_mask,
    remove_time_dim,
    sequence_initial_states,
    sequence_plan,
    sequence_values,
)
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import StampValues, run

SEQ_PIECES = (AddStatesFromEpisodesToBatch, AddTimeDimToBatchAndZeroPad)


class Counter:
    """A stateful numpy module whose state counts steps: ``state_out`` at episode step t is t + 1.

    Its value of an observation is 100 * (its state before that observation) + obs, so a value
    read with a wrong ``state_in`` is off by a multiple of 100.
    """

    def is_stateful(self) -> bool:
        return True

    def get_initial_state(self) -> dict[str, Any]:
        return {"h": np.zeros(1), "c": np.zeros(2)}

    def compute_values(self, batch: dict[str, Any]) -> np.ndarray:
        obs_ST = np.asarray(batch["obs"], np.float64)
        h_ST = batch["state_in"]["h"][:, :1] + np.arange(obs_ST.shape[1])[None, :]  # one step more per item
        return np.where(batch["loss_mask"], 100 * h_ST + obs_ST, 0.0)


def obs_at(t: int) -> float:
    return float((3 * t) % 5)


def episode(length: int, *, id_: str = "a", terminated: bool = False, rewards_from: float = 0.0) -> SingleAgentEpisode:
    """Counter's episode: obs (3t) % 5, reward rewards_from + t, state_out {h: [t+1], c: [t+1, -(t+1)]}."""
    return SingleAgentEpisode(
        id_,
        observations=[obs_at(t) for t in range(length + 1)],
        actions=[0] * length,
        rewards=[rewards_from + t for t in range(length)],
        extra_model_outputs={
            "state_out": [{"h": np.array([t + 1.0]), "c": np.array([t + 1.0, -t - 1.0])} for t in range(length)]
        },
        terminated=terminated,
    )


def cut(ep: SingleAgentEpisode, bounds: list[int], lookback: int = 1) -> list[SingleAgentEpisode]:
    """``ep`` as chunks [bounds[i], bounds[i + 1]) with up to ``lookback`` steps of lookback."""
    return [ep.slice(slice(a, b), len_lookback_buffer=lookback) for a, b in itertools.pairwise(bounds)]


def seq_batch(episodes: list[SingleAgentEpisode], max_seq_len: int, module: Any = None) -> dict[str, Any]:
    pieces = [AddColumnsFromEpisodesToTrainBatch(()), *(p(max_seq_len) for p in SEQ_PIECES)]
    out = ConnectorPipelineV2(pieces)(rl_module=module or Counter(), batch={}, episodes=episodes)
    return out["default_policy"]


class TestSequencePlan:
    def test_plan_cuts_each_chunk_in_order(self) -> None:
        col = episodes_to_columnar([episode(5), episode(0, id_="b"), episode(3, id_="c")])
        plan = sequence_plan(col, 2)
        assert (plan.chunk.tolist(), plan.start.tolist(), plan.length.tolist()) == (
            [0, 0, 0, 2, 2],
            [0, 2, 4, 0, 2],
            [2, 2, 1, 2, 1],
        )
        boot = sequence_plan(col, 2, bootstrap=True)
        assert (boot.chunk.tolist(), boot.start.tolist(), boot.length.tolist()) == (
            [0, 0, 0, 1, 2, 2],
            [0, 2, 4, 0, 0, 2],
            [2, 2, 2, 1, 2, 2],
        )

    def test_bad_max_seq_len_raises(self) -> None:
        col = episodes_to_columnar([episode(2)])
        with pytest.raises(ConfigError, match=r"'max_seq_len' must be an int >= 1 \(got 0\)"):
            sequence_plan(col, 0)
        for piece in (*SEQ_PIECES, GeneralAdvantageEstimation):
            with pytest.raises(ConfigError, match=r"'max_seq_len' must be an int >= 1 \(got 0\)"):
                piece(max_seq_len=0)


class TestInitialStates:
    @pytest.mark.parametrize("lookback", [1, 3])
    def test_cuts_on_multiples_of_max_seq_len_give_the_uncut_batch(self, lookback: int) -> None:
        ep = episode(10, terminated=True)
        whole = seq_batch([ep], 3)
        parts = seq_batch(cut(ep, [0, 6, 9, 10], lookback), 3)
        assert whole.keys() == parts.keys() == {
            "obs", "actions", "rewards", "terminateds", "truncateds", "state_in", "loss_mask", "seq_lens"
        }  # fmt: skip
        for key in ("obs", "actions", "rewards", "terminateds", "truncateds", "loss_mask", "seq_lens"):
            np.testing.assert_array_equal(whole[key], parts[key], err_msg=key)
        for key in ("h", "c"):
            np.testing.assert_array_equal(whole["state_in"][key], parts["state_in"][key])
        assert whole["state_in"]["h"][:, 0].tolist() == [0, 3, 6, 9]
        assert whole["seq_lens"].tolist() == [3, 3, 3, 1]

    @pytest.mark.parametrize("lookback", [1, 3])
    def test_state_in_is_the_state_out_of_the_step_before_across_any_cut(self, lookback: int) -> None:
        chunks = [*cut(episode(11), [0, 4, 5, 11], lookback), episode(2, id_="b")]
        out = seq_batch(chunks, 3)
        # Sequences start at episode steps 0, 3 | 4 | 5, 8 | b: 0; each state_in counts the steps before.
        assert out["state_in"]["h"][:, 0].tolist() == [0, 3, 4, 5, 8, 0]
        assert out["state_in"]["c"].tolist() == [[0, 0], [3, -3], [4, -4], [5, -5], [8, -8], [0, 0]]
        assert out["seq_lens"].tolist() == [3, 1, 1, 3, 3, 2]
        assert out["rewards"].tolist() == [
            [0, 1, 2], [3, 0, 0], [4, 0, 0], [5, 6, 7], [8, 9, 10], [0, 1, 0]
        ]  # fmt: skip

    def test_initial_state_comes_from_the_module_at_an_episode_start(self) -> None:
        class Offset(Counter):
            def get_initial_state(self) -> dict[str, Any]:
                return {"h": np.array([-7.0]), "c": np.array([1.0, 2.0])}

        out = seq_batch([episode(2), *cut(episode(4, id_="b"), [0, 1, 4])], 2, Offset())
        assert out["state_in"]["h"][:, 0].tolist() == [-7, -7, 1, 3]
        assert out["state_in"]["c"].tolist() == [[1, 2], [1, 2], [1, -1], [3, -3]]

    def test_a_continuation_without_lookback_raises(self) -> None:
        chunks = cut(episode(8), [0, 4, 8], lookback=0)
        with pytest.raises(ConfigError, match=r"chunk 1 .*t_started=4.*'episode_lookback_horizon' >= 1"):
            seq_batch(chunks, 3)

    def test_missing_state_out_raises(self) -> None:
        ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[1.0, 1.0])
        with pytest.raises(ConfigError, match="needs 'state_out' stored per step"):
            seq_batch([ep], 3)

    def test_initial_state_of_other_keys_raises(self) -> None:
        col = episodes_to_columnar([episode(2)])
        with pytest.raises(ConfigError, match="initial state must have the keys"):
            sequence_initial_states(col, sequence_plan(col, 2), {"h": np.zeros(1)})


class TestTimeDim:
    def test_zero_padding_and_masks_around_max_seq_len(self) -> None:
        # Lengths 1, T - 1, T and T + 1 with T = 4; rewards 10 * i + t.
        chunks = [episode(n, id_=str(i), rewards_from=10.0 * i) for i, n in enumerate([1, 3, 4, 5])]
        out = seq_batch(chunks, 4)
        assert out["rewards"].tolist() == [
            [0, 0, 0, 0],
            [10, 11, 12, 0],
            [20, 21, 22, 23],
            [30, 31, 32, 33],
            [34, 0, 0, 0],
        ]
        assert out["loss_mask"].tolist() == [
            [True, False, False, False],
            [True, True, True, False],
            [True, True, True, True],
            [True, True, True, True],
            [True, False, False, False],
        ]
        assert out["seq_lens"].tolist() == [1, 3, 4, 4, 1] and out["seq_lens"].dtype == np.int64
        assert out["obs"][4].tolist() == [obs_at(4), 0, 0, 0]
        assert out["state_in"]["h"][:, 0].tolist() == [0, 0, 0, 0, 4]

    def test_add_and_remove_time_dim_round_trip(self) -> None:
        col = episodes_to_columnar([episode(5), episode(1, id_="b"), episode(3, id_="c")])
        plan = sequence_plan(col, 2)
        values = {"a": np.arange(9), "b": (np.arange(18.0).reshape(9, 2),)}
        padded = add_time_dim(values, plan, 3)
        assert padded["a"].tolist() == [[0, 1, 0], [2, 3, 0], [4, 0, 0], [5, 0, 0], [6, 7, 0], [8, 0, 0]]
        back = remove_time_dim(padded, plan)
        assert back["a"].tolist() == list(range(9)) and back["b"][0].tolist() == values["b"][0].tolist()
        assert loss_mask(plan, 3).sum(axis=1).tolist() == [2, 2, 1, 1, 2, 1]

    def test_a_column_not_per_step_is_refused(self) -> None:
        pipe = ConnectorPipelineV2([AddColumnsFromEpisodesToTrainBatch(()), AddTimeDimToBatchAndZeroPad(3)])
        with pytest.raises(ConfigError, match=r"column 'per_chunk' must hold arrays with one row per step \(4\)"):
            pipe(rl_module=Counter(), batch={"default_policy": {"per_chunk": np.zeros(1)}}, episodes=[episode(4)])


class TestNotStateful:
    def test_pieces_leave_the_batch_unchanged(self, chunks: list[SingleAgentEpisode]) -> None:
        before = run([AddColumnsFromEpisodesToTrainBatch()], chunks)
        after = run([AddColumnsFromEpisodesToTrainBatch(), *(p(2) for p in SEQ_PIECES)], chunks)
        assert after.keys() == before.keys()
        for key in before:
            np.testing.assert_array_equal(after[key], before[key])

    def test_gae_values_are_the_flat_values(self, chunks: list[SingleAgentEpisode]) -> None:
        out = run([GeneralAdvantageEstimation(max_seq_len=1, standardize_advantages=False)], chunks)
        obs = [ep.get_observations(t) for ep in chunks for t in range(len(ep))]
        assert out["vf_preds"].tolist() == StampValues().compute_values(np.asarray(obs)).tolist()


class TestStatefulValues:
    def test_sequence_values_of_every_stored_observation(self) -> None:
        chunks = cut(episode(7), [0, 3, 7])
        col = episodes_to_columnar(chunks)
        # Stored observations: steps 0..3 of chunk 0, steps 3..7 of chunk 1; value 100 t + obs.
        expected = [100 * t + obs_at(t) for t in [0, 1, 2, 3, 3, 4, 5, 6, 7]]
        for max_seq_len in (1, 2, 3, 4, 20):
            assert sequence_values(Counter(), col, max_seq_len).tolist() == expected

    @pytest.mark.parametrize("max_seq_len", [2, 3, 20])
    def test_gae_with_a_stateful_module_across_a_cut(self, max_seq_len: int) -> None:
        gamma, lam = 0.9, 0.5
        chunks = [*cut(episode(7, terminated=True), [0, 3, 7]), episode(2, id_="b")]
        out = ConnectorPipelineV2([GeneralAdvantageEstimation(gamma=gamma, lambda_=lam, max_seq_len=max_seq_len)])(
            rl_module=Counter(), batch={}, episodes=chunks
        )["default_policy"]
        assert out["vf_preds"].tolist() == [100 * t + obs_at(t) for t in [0, 1, 2, 3, 4, 5, 6, 0, 1]]
        expected = []
        for ep in chunks:
            t0, n = ep.t_started, len(ep)
            values = [100 * (t0 + t) + obs_at(t0 + t) for t in range(n + 1)]
            adv, acc = [0.0] * n, 0.0
            for t in reversed(range(n)):
                next_value = 0.0 if (t == n - 1 and ep.is_terminated) else values[t + 1]
                acc = (t0 + t) + gamma * next_value - values[t] + gamma * lam * (acc if t < n - 1 else 0.0)
                adv[t] = acc
            expected += adv
        adv_std = (np.asarray(expected) - np.mean(expected)) / np.std(expected)
        np.testing.assert_allclose(out["advantages"], adv_std, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["value_targets"], np.asarray(expected) + out["vf_preds"], rtol=1e-12)
