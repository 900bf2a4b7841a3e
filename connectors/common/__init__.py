"""Pieces used by more than one pipeline: MeanStdFilter (env-to-module and learner)."""

from connectors.common.mean_std_filter import MeanStdFilter, combine_moments

__all__ = ["MeanStdFilter", "combine_moments"]
