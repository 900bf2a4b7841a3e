"""Learner connector pieces: train batches from whole lists of episode chunks, vectorized.

- ``AgentToModuleMapping``: multi-agent chunks regrouped by module, each module's learner
  pipeline then runs on its agents' chunks.
- ``AddColumnsFromEpisodesToTrainBatch``: obs, actions, rewards, terminateds, truncateds and
  chosen extra model outputs.
- ``AddNextObservationsFromEpisodesToTrainBatch``: next_obs, gathered from the stored
  observations (the observation after each step), never stored twice.
- ``GeneralAdvantageEstimation``: advantages and value targets, bootstrapped right across cuts.
- ``NStepReturns``: discounted n-step returns within each chunk, the n used and the bootstrap
  observation.
- ``AddStatesFromEpisodesToBatch`` and ``AddTimeDimToBatchAndZeroPad``: for stateful modules,
  each step sequence's ``state_in`` and per-step columns as zero-padded [S, max_seq_len] sequences
  (``sequences`` holds the plan and the helpers, ``sequence_values`` among them).
- ``FilterObservationKeysLearner`` and ``FlattenObservationsLearner``: the runner's key filter and
  flattening for a module that asks for flat input, applied to every observation column and to
  GAE's value inputs.
- ``PrevActionsPrevRewards`` and ``FrameStacking``: the seed's trajectory views (``shift=-1``,
  ``shift=[-2,-1]``, ``"-50:-1"``) as pieces.
- ``VTraceAdvantages``: V-trace's value targets and policy-gradient advantages (IMPALA), in GAE's
  place for data sampled by an older policy (``vtrace`` is the computation).

What they share (the columnar view, ``batch[module_id]``, lookback history) is in ``learner_piece``.
"""

from connectors.learner.add_columns import AddColumnsFromEpisodesToTrainBatch
from connectors.learner.add_next_observations import AddNextObservationsFromEpisodesToTrainBatch
from connectors.learner.agent_to_module_mapping import AgentToModuleMapping
from connectors.learner.frame_stacking import FrameStacking
from connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation, gae
from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of, step_index
from connectors.learner.n_step_returns import NStepReturns
from connectors.learner.observation_maps import FilterObservationKeysLearner, FlattenObservationsLearner, ObservationMap
from connectors.learner.prev_actions_prev_rewards import PrevActionsPrevRewards
from connectors.learner.sequences import (
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    SequencePlan,
    add_time_dim,
    loss_mask,
    remove_time_dim,
    sequence_initial_states,
    sequence_plan,
    sequence_values,
)
from connectors.learner.vtrace import VTraceAdvantages, vtrace

__all__ = [
    "DEFAULT_MODULE_ID",
    "AddColumnsFromEpisodesToTrainBatch",
    "AddNextObservationsFromEpisodesToTrainBatch",
    "AddStatesFromEpisodesToBatch",
    "AddTimeDimToBatchAndZeroPad",
    "AgentToModuleMapping",
    "FilterObservationKeysLearner",
    "FlattenObservationsLearner",
    "FrameStacking",
    "GeneralAdvantageEstimation",
    "LearnerPiece",
    "NStepReturns",
    "ObservationMap",
    "PrevActionsPrevRewards",
    "SequencePlan",
    "VTraceAdvantages",
    "add_time_dim",
    "columnar_of",
    "gae",
    "loss_mask",
    "remove_time_dim",
    "sequence_initial_states",
    "sequence_plan",
    "sequence_values",
    "step_index",
    "vtrace",
]
