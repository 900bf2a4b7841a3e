"""RLlib's argument forms: what add takes, aliases of one setting, n-step ranges and their draws."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.errors import ReplayError
from replay.compat import as_columnar, draw_n_step, n_step_range, resolve_alias
from tests.replay.test_storage import episode


class TestAsColumnar:
    def test_one_episode_is_a_list_of_one(self) -> None:
        col = as_columnar(episode("a", 3))
        assert col is not None and (col.ids, col.num_env_steps) == (["a"], 3)

    def test_a_tuple_of_episodes_is_taken_like_a_list(self) -> None:
        col = as_columnar((episode("a", 2), episode("b", 1)))
        assert col is not None and (col.ids, col.lens.tolist()) == (["a", "b"], [2, 1])

    def test_columnar_passes_through_and_nothing_is_none(self) -> None:
        col = episodes_to_columnar([episode("a", 2)])
        assert as_columnar(col) is col
        assert (as_columnar([]), as_columnar(None)) == (None, None)

    def test_another_type_raises_saying_what_is_accepted(self) -> None:
        with pytest.raises(
            ReplayError,
            match=r"^add takes a SingleAgentEpisode, a list \(or tuple\) of them, or a ColumnarEpisodes \(got dict\)$",
        ):
            as_columnar({"obs": [0, 1]})

    def test_a_list_with_another_item_raises_naming_its_index(self) -> None:
        with pytest.raises(ReplayError, match=r"\(got list with str at \[1\]\)$"):
            as_columnar([episode("a", 1), "b"])


class TestResolveAlias:
    def test_either_name_or_the_default(self) -> None:
        assert resolve_alias("b", 3, "a", None, default=7) == 3
        assert resolve_alias("b", None, "a", 4, default=7) == 4
        assert resolve_alias("b", None, "a", None, default=7) == 7
        assert resolve_alias("b", 5, "a", 5, default=7) == 5

    def test_both_given_and_different_raises_naming_both(self) -> None:
        with pytest.raises(
            ReplayError,
            match=r"^'capacity_env_steps' and 'capacity' name the same setting; give one \(got 10 and 20\)$",
        ):
            resolve_alias("capacity_env_steps", 10, "capacity", 20, default=1)


class TestNStep:
    @pytest.mark.parametrize(("given", "expected"), [(None, 1), (3, 3), ((1, 4), (1, 4)), ([2, 2], (2, 2))])
    def test_accepted_forms(self, given: object, expected: object) -> None:
        assert n_step_range(given) == expected

    @pytest.mark.parametrize("given", [(3, 1), (0, 2), (1, 2, 3), (1.0, 2), (True, 2)], ids=str)
    def test_a_bad_range_raises(self, given: object) -> None:
        with pytest.raises(
            ReplayError,
            match=r"^'n_step' must be an int >= 1 or a \(low, high\) pair of ints with 1 <= low <= high \(got ",
        ):
            n_step_range(given)

    def test_a_bad_int_raises(self) -> None:
        with pytest.raises(ReplayError, match=r"^'n_step' must be an int >= 1 \(got 0\)$"):
            n_step_range(0)

    def test_a_range_is_drawn_per_item_from_low_to_high_inclusive(self) -> None:
        drawn = draw_n_step((2, 4), 3000, np.random.default_rng(0))
        assert isinstance(drawn, np.ndarray) and sorted(set(drawn.tolist())) == [2, 3, 4]
        assert np.bincount(drawn)[2:].min() > 900  # uniform: about 1000 each

    def test_an_int_is_no_draw(self) -> None:
        rng = np.random.default_rng(0)
        state = rng.bit_generator.state
        assert draw_n_step(3, 5, rng) == 3
        assert rng.bit_generator.state == state
