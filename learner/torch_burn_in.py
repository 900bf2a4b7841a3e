"""Burn-in for torch recurrent modules: ``burn_in_states`` replays each sequence's first steps without gradient.

R2D2's burn-in: a sequence drawn from replay starts from the ``state_in`` the runner stored, made
by older weights; running the current module over the sequence's first ``burn_in`` steps without
gradient gives a state closer to what the current weights would hold, and the loss is taken over
the remaining steps only. The input is a time-dimension batch (as
:func:`learner.replay_sequences.sample_sequences` returns): per-step columns [S, T, ...],
``loss_mask`` [S, T], ``seq_lens`` [S], ``state_in`` {k: [S, ...]}. Padding is only at the end of
a sequence, so the burn-in steps of a sequence longer than ``burn_in`` are all real.

Sequences whose real length is ``<= burn_in`` have no step left to train on: they are removed
(their row of every column, ``state_in`` included), so the result has at most S rows, each with
``seq_lens >= 1``; the other rows keep their order. A learner that needs a fixed batch size draws
more sequences.
"""

from __future__ import annotations

from typing import Any

import torch

from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.modules.torch_module import TorchRLModule, to_tensor
from ray_sampler.validate import check_int

__all__ = ["burn_in_states"]

_PER_SEQUENCE = (Columns.STATE_IN, Columns.SEQ_LENS)


def burn_in_states(module: TorchRLModule, batch: dict[str, Any], burn_in: int) -> dict[str, Any]:
    """``batch`` (numpy or tensors) as tensors of ``module``'s float dtype and device, with each
    sequence's first ``burn_in`` steps run through ``module.forward_train`` under ``torch.no_grad()``
    from its ``state_in`` and then removed: per-step columns [S', T - burn_in, ...], ``loss_mask``
    and ``seq_lens`` shortened to match, ``state_in`` the ``state_out`` after the burn-in steps
    (no autograd graph). Sequences no longer than ``burn_in`` are removed (see the module
    docstring). ``burn_in=0`` gives the batch back as tensors.

    ConfigError for a module that is not stateful or whose ``forward_train`` outputs lack
    ``state_out``, a batch without the sequence columns, a per-step column not [S, T, ...], or
    ``burn_in`` outside [0, T - 1].
    """
    if not is_stateful(module):
        raise ConfigError(f"burn_in_states needs a stateful module (got {type(module).__name__})")
    missing = [k for k in (Columns.STATE_IN, Columns.LOSS_MASK, Columns.SEQ_LENS) if k not in batch]
    if missing:
        raise ConfigError(f"burn_in_states needs a time-dimension batch: it lacks {missing} (has {sorted(batch)})")
    param = next(module.parameters(), None)
    tensors = to_tensor(batch) if param is None else to_tensor(batch, float_dtype=param.dtype, device=param.device)
    mask_ST = tensors[Columns.LOSS_MASK].bool()
    num_seq, max_seq_len = mask_ST.shape
    burn_in = check_int("burn_in", burn_in, minimum=0, maximum=max_seq_len - 1)
    for key, value in tensors.items():
        if key not in _PER_SEQUENCE:
            for leaf in tree.flatten(value):
                if tuple(leaf.shape[:2]) != (num_seq, max_seq_len):
                    raise ConfigError(
                        f"burn_in_states: column {key!r} must be per step, [S, T, ...] = "
                        f"[{num_seq}, {max_seq_len}, ...] (got {tuple(leaf.shape)})"
                    )
    seq_lens_S = tensors[Columns.SEQ_LENS]
    keep_S = seq_lens_S > burn_in
    kept = {k: tree.map_structure(lambda leaf: leaf[keep_S], v) for k, v in tensors.items()}
    state_in = kept[Columns.STATE_IN]
    if burn_in and bool(keep_S.any()):
        warm = {
            k: tree.map_structure(lambda leaf: leaf[:, :burn_in], v) for k, v in kept.items() if k not in _PER_SEQUENCE
        }
        warm[Columns.STATE_IN] = state_in
        warm[Columns.SEQ_LENS] = torch.full_like(kept[Columns.SEQ_LENS], burn_in)
        with torch.no_grad():
            out = module.forward_train(warm)
        if Columns.STATE_OUT not in out:
            raise ConfigError(
                f"burn_in_states: {type(module).__name__}.forward_train must return {Columns.STATE_OUT!r}, "
                f"the state after the last step (got {sorted(out)})"
            )
        state_in = tree.map_structure(lambda s: s.detach(), out[Columns.STATE_OUT])
    result = {
        k: tree.map_structure(lambda leaf: leaf[:, burn_in:], v) for k, v in kept.items() if k not in _PER_SEQUENCE
    }
    result[Columns.STATE_IN] = state_in
    result[Columns.SEQ_LENS] = kept[Columns.SEQ_LENS] - burn_in
    return result
