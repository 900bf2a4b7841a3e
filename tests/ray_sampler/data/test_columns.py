"""Columns: the column names are a batch and wire format, pinned to their exact strings."""

from __future__ import annotations

from ray_sampler.data.columns import Columns

EXPECTED = {
    "OBS": "obs",
    "ACTIONS": "actions",
    "ACTIONS_FOR_ENV": "actions_for_env",
    "ACTION_DIST_INPUTS": "action_dist_inputs",
    "ACTION_LOGP": "action_logp",
    "VF_PREDS": "vf_preds",
    "STATE_IN": "state_in",
    "STATE_OUT": "state_out",
    "REWARDS": "rewards",
    "TERMINATEDS": "terminateds",
    "TRUNCATEDS": "truncateds",
    "NEXT_OBS": "next_obs",
    "ADVANTAGES": "advantages",
    "VALUE_TARGETS": "value_targets",
    "N_STEP_RETURNS": "n_step_returns",
    "N_STEP": "n_step",
    "N_STEP_TERMINATED": "n_step_terminated",
    "N_STEP_NEXT_OBS": "n_step_next_obs",
    "PREV_ACTIONS": "prev_actions",
    "PREV_REWARDS": "prev_rewards",
    "LOSS_MASK": "loss_mask",
    "SEQ_LENS": "seq_lens",
    "WEIGHTS": "weights",
    "KEYS": "keys",
}


def test_every_column_name_has_its_pinned_string() -> None:
    names = {k: v for k, v in vars(Columns).items() if k.isupper()}
    assert names == EXPECTED


def test_column_names_are_distinct() -> None:
    values = [v for k, v in vars(Columns).items() if k.isupper()]
    assert len(set(values)) == len(values)
