"""Column names shared by connectors, modules and learners (RLlib's ``Columns`` names)."""

from __future__ import annotations

__all__ = ["Columns"]


class Columns:
    """Keys of forward batches, module outputs and episode extra model outputs."""

    OBS = "obs"
    ACTIONS = "actions"
    ACTIONS_FOR_ENV = "actions_for_env"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    ACTION_LOGP = "action_logp"
    VF_PREDS = "vf_preds"
