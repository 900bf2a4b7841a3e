"""Ray Tune trainables for ray-sampler's training loops: sweeps over the typed config by dotted path.

    from ray import tune
    from ray_sampler.tune import trainable, tuner

    sweep = tuner(                                   # checks the space first; or tune.Tuner(trainable("ppo"), ...)
        "ppo",
        param_space={"ppo.lr": tune.loguniform(1e-4, 1e-2), "max_iterations": 20},
        tune_config=tune.TuneConfig(metric="return_mean", mode="max", num_samples=4),
    )
    results = sweep.fit()

- **Config.** A trial's config maps the keys of a run's ``config.toml``, dotted (``"ppo.lr"``,
  ``"max_iterations"``, ``"env_runner_group.num_env_runners"``, ``"env"``), to values. The trial
  runs what ``ray-sampler train`` (``"ppo"``) or ``ray-sampler train-dqn`` (``"dqn"``) runs with
  those options, in its own run directory under the trial's directory, so a key that is no option
  or a value it refuses is the command's one-line error. ``check_param_space`` raises it before
  any trial starts, for every grid value and one sample of every other domain (``tuner`` calls it).
- **Reports.** Each iteration reports its ``metrics.csv`` row (the same columns and values) through
  ``tune.report``.
- **Checkpoints.** With ``"checkpoint_every": N``, the run's own checkpoint goes to Tune with the
  run's ``config.toml`` and ``metrics.csv`` up to it (a Tune ``Checkpoint`` of that directory). A
  trial Tune restores (a restarted trial, ``Tuner.restore``, population-based training's exploit)
  resumes from it as ``--resume`` does: the counters and the curve go on from that iteration, with
  no gap and no repeated row.
- **Population-based training** may mutate the options in ``MUTABLE`` only (``check_mutations``):
  those read afresh at every update and kept in no checkpoint.
- **Resources.** Each trial reserves one placement group (``trial_resources``): bundle 0 for the
  trial itself (it runs the learner when ``num_learners`` is 0: 1 CPU), one bundle per runner and
  one per learner actor. The trial's runners and learners take those bundles
  (``ray_sampler.resources.lend_bundles``) instead of reserving their own; when a trial stops
  (done, or stopped early by a scheduler), Tune removes the group and every actor of the trial goes.

``ray-sampler tune --config sweep.toml`` runs a whole sweep from a TOML file (``ray_sampler.cli.sweep``).
The asynchronous optimizers' trials checkpoint too (what their runners had in flight at a save is
counted lost when a trial restarts from it).
"""

from __future__ import annotations

from ray_sampler.cli import trials as _trials
from ray_sampler.cli.trials import *  # noqa: F403  (the trainables' public names)

__all__ = _trials.__all__
