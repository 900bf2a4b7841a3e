"""Column names shared by connectors, modules and learners (RLlib's ``Columns`` names)."""

from __future__ import annotations

__all__ = ["Columns"]


class Columns:
    """Keys of forward batches, module outputs, episode extra model outputs and train batches."""

    OBS = "obs"
    ACTIONS = "actions"
    ACTIONS_FOR_ENV = "actions_for_env"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    ACTION_LOGP = "action_logp"
    VF_PREDS = "vf_preds"
    STATE_IN = "state_in"
    """A stateful module's state before the step (forward batch; train batch: one per sequence)."""
    STATE_OUT = "state_out"
    """A stateful module's state after the step (module output; stored per step in extra_model_outputs)."""

    # Train-batch columns (what the learner connector pieces write, one row per step).
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    NEXT_OBS = "next_obs"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    N_STEP_RETURNS = "n_step_returns"
    N_STEP = "n_step"
    N_STEP_TERMINATED = "n_step_terminated"
    N_STEP_NEXT_OBS = "n_step_next_obs"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    LOSS_MASK = "loss_mask"
    """Time-dimension train batches: True at real steps, False at zero padding ([B, T])."""
    SEQ_LENS = "seq_lens"
    """Time-dimension train batches: each sequence's real length ([B])."""

    # Replay-sample columns beside the train-batch ones (what a replay buffer's sample() adds).
    WEIGHTS = "weights"
    KEYS = "keys"
