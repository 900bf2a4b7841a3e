"""PrevActionsPrevRewardsEnvToModule: the runner's previous actions and rewards equal the learner's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from connectors.env_to_module import PrevActionsPrevRewardsEnvToModule
from ray_sampler.errors import ConfigError
from tests.connectors.env_to_module.views import CASES, runner_and_learner_views


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_runner_prev_actions_and_rewards_equal_the_learners(case: dict[str, Any], columnar: bool) -> None:
    chunks, seen, batch = runner_and_learner_views(columnar=columnar, **case)
    assert any(c.t_started == 0 for c in chunks) and any(c.t_started >= 2 for c in chunks)
    for key in ("prev_actions", "prev_rewards"):
        assert batch[key].dtype == seen[f"seen_{key}"].dtype, key
        np.testing.assert_array_equal(batch[key], seen[f"seen_{key}"], err_msg=key)


def test_first_steps_after_a_cut_see_the_actions_from_before_it() -> None:
    chunks, _, _ = runner_and_learner_views(columnar=True)
    chunk = next(c for c in chunks if c.t_started >= 2 and len(c))
    np.testing.assert_array_equal(
        chunk.get_extra_model_outputs("seen_prev_actions", 0), chunk.get_actions([-2, -1], neg_index_as_lookback=True)
    )


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"'n_prev_actions' must be an int >= 0 \(got -1\)"):
        PrevActionsPrevRewardsEnvToModule(n_prev_actions=-1)
