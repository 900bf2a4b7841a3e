""" "Did you mean ...?": the known names closest to an unknown one, for every error that names one.

Every unknown option, config key, env id, sweep key and metric gets its suggestion here, so that
they all read alike:

>>> did_you_mean("max_iteration", ["max_iterations", "max_env_steps", "seed"])
"did you mean 'max_iterations'?"
>>> did_you_mean("CartPol-v1", ["CartPole-v1", "CartPole-v0", "Acrobot-v1"])
"did you mean 'CartPole-v1' or 'CartPole-v0'?"
>>> did_you_mean("zzz", ["CartPole-v1"])
''
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CUTOFF", "MARGIN", "MAX_SUGGESTIONS", "close_names", "did_you_mean"]

MAX_SUGGESTIONS = 3
"""At most this many names are suggested, the closest first."""
CUTOFF = 0.6
"""``difflib``'s similarity ratio a known name needs to be suggested (its own default)."""


MARGIN = 0.1
"""A name less similar than the closest by more than this is left out: ``entropy_coef`` gets
``entropy_coeff``, not ``vf_coeff`` beside it."""


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The known names closest to ``name``, the closest first (none: nothing is close)."""
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=MAX_SUGGESTIONS, cutoff=CUTOFF)
    ratios = [difflib.SequenceMatcher(None, name, c).ratio() for c in close]
    return [c for c, r in zip(close, ratios, strict=True) if r >= ratios[0] - MARGIN]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'a' or 'b'?"`` for the known names closest to ``name``; ``""`` if none is."""
    close = close_names(name, known)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
