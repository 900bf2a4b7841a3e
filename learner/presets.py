"""Per-env PPO presets: tuned PPOTrainingConfig values, applied before the user's own settings.

``ppo_preset(env_id, base)`` returns ``base`` with the preset of ``env_id`` applied (``base``
itself for an env without one); fields a preset does not name keep ``base``'s values (seeds,
the runner group, learners). The CLI applies it first, so the user's flags override it.

Pendulum-v1: Box actions with a diagonal Gaussian policy. The reference is RLlib's tuned Pendulum
PPO example; "tuning" below means single seed-0 runs of this preset with one value changed, to
the 399,360-step budget or -300 (the preset itself took 108,544 env steps in the same session;
runs of one seed vary by ~30%: bench/RESULTS.md has the measured runs of several seeds):

====================================== ===================== =============================================
Field                                  Value                 Why
====================================== ===================== =============================================
``ppo.lr``                             3e-4                  RLlib's value. 1e-3 reached -300 sooner (57k
                                                             steps), then fell back to -1,277 by 400k.
``ppo.gamma``                          0.95                  RLlib's value; a short horizon keeps value
                                                             targets small (a step costs at most 16.3, so
                                                             discounted returns stay above -330).
``ppo.lambda_``                        0.1                   RLlib's value: advantages lean on the value
                                                             head. 0.95: -445 after 400k steps.
``ppo.num_epochs``                     6                     RLlib's value.
``ppo.minibatch_size``                 64                    32 steps per epoch on 2,048 rows. 256 (then
                                                             default): -941 after 400k steps.
``ppo.entropy_coeff``                  0.0                   The spread is the learned log-std; no bonus
                                                             was needed to reach -300.
``ppo.vf_clip_param``                  10.0                  RLlib's value: caps each step's squared value
                                                             error, so the far-off targets of an untrained
                                                             value head do not swamp the update.
                                                             Uncapped: 238k steps.
``ppo.grad_clip``                      None                  Policy and value share one global norm; the
                                                             default clip at 0.5 took 203k steps.
``env_runner.num_envs_per_env_runner`` 4                     With 256 steps each and 2 runners: 2,048 steps
``env_runner.rollout_fragment_length`` 256                   per iteration, 192 gradient steps on them.
``env_runner.normalize_actions``       True                  The Gaussian lives in [-1, 1], unsquashed to
                                                             [-2, 2], so std 1 spans the torque range
                                                             (clipping instead: 145k steps).
``env_runner.module_config``           initial_log_std 0.0   Std 1 at the start; the base's own value wins,
                                                             and a custom ``module_class`` gets none.
``max_iterations``                     195                   195 x 2,048 = 399,360 env steps (~400k) with
                                                             the default 2 runners.
``target_return``                      -300.0                Pendulum-v1 has no ``reward_threshold``;
                                                             RLlib's example stops at -300.
====================================== ===================== =============================================

No observation filter: Pendulum's observations (cos, sin, angular velocity in [-8, 8]) are
already of order one, and the preset reaches -300 without one (``train_ppo`` would also have to
sync a MeanStdFilter's state to the learner's pipeline, which it does not today).

StatelessCartPole-v1: CartPole with the velocities hidden needs memory, so the
preset trains a torch LSTM (``TorchLSTMModule``: a 64-unit tanh encoder, a 64-cell LSTM, 64-unit
heads; needs ``ray-sampler[torch]``). The PPO settings are RLlib's tuned example's; each was
checked by putting the earlier preset's value back alone (4,096 env steps an iteration, seeds 1
and 2), and the iteration size by seeds 0-4 at 1,024, 2,048 and 4,096 env steps
(``bench/lstm_ablation.py``; bench/RESULTS.md has every run). "100-ep" is env steps until the
last 100 episodes average 350, the run's stop:

====================================== ===================== =============================================
Field                                  Value                 Why
====================================== ===================== =============================================
``framework``                          torch                 The LSTM is a torch module (the numpy PPO has
                                                             no backpropagation through time).
``env_runner.module_class``            TorchLSTMModule       A user's own module class is kept.
``ppo.observation_filter``             mean_std              The observations (cart position, pole angle)
                                                             are a few hundredths: unscaled, the LSTM
                                                             learned nothing in 40k steps (mean return
                                                             ~21, as random); normalized, 312 at 61k.
``ppo.lambda_``                        1.0                   RLlib's value. 0.95: no 100-ep 350 within
                                                             150k (seeds 1 and 2).
``ppo.vf_clip_param``                  10.0                  RLlib's value: caps each step's squared value
                                                             error. Uncapped: no 100-ep 350 within 150k
                                                             (seeds 1 and 2).
``ppo.clip_param``                     0.3                   RLlib's value. 0.2: 90k and 102k against 70k
                                                             and 74k (seeds 1 and 2).
``ppo.lr``                             3e-4                  RLlib's value. 1e-3: 61k on seed 1, no 350
                                                             within 150k on seed 2.
``ppo.vf_coeff``                       0.05                  Policy and value heads share the LSTM; a
                                                             small value weight (RLlib's example: 0.05)
                                                             keeps the value error from dominating it.
``ppo.grad_clip``                      None                  RLlib's value (no clip).
``ppo.num_epochs``, ``max_seq_len``    6, 20                 RLlib's values.
``rollout_fragment_length``            256                   2,048 env steps an iteration with 2 runners x 4
                                                             sub-envs: 100-ep 350 at 59k-92k (median 61k)
                                                             in seeds 0-4; 4,096 (RLlib's 4,000): 66k-74k
                                                             (median 70k); 1,024: missed in 3 of 5 seeds.
``max_env_steps``                      300,000               More than three times the slowest of those.
``target_return``                      350.0                 The env has no ``reward_threshold``; RLlib's
                                                             tuned example stops at 350.
====================================== ===================== =============================================

The other MPE scenarios (``_mpe``): one seed-0 run of 150,000 env steps each at the PPO defaults and at
simple_spread's settings, then seeds 1 and 2 where the two were close or a target was to be set
(``bench/mpe_presets.py``; bench/RESULTS.md has every figure):

================================ ========== ========== ==================================================
Scenario                         Settings   Target     Why
================================ ========== ========== ==================================================
``simple_v3``                    defaults   -10, 50k   The defaults ended at -6.6/-7.4 (seeds 0/1), the
                                                       spread settings at -9.3/-9.3; both pass -10 by 26k.
``simple_speaker_listener_v4``   spread     -36, 100k  -31.6 against -34.6 (seed 0); seeds 1 and 2 held
                                                       -30 to -36 from 26k on.
``simple_reference_v3``          spread     -45, 150k  The defaults fell below random play (-58) between
                                                       25k and 76k; spread passed -45 by 50-76k.
``simple_adversary_v3``          spread     none, 100k Competitive: the summed return is no goal; the
                                                       good agents got 13.7 against 12.3 (seed 0).
``simple_tag_v3``                spread     none, 150k The adversaries got 72.6 against 34.5 (seed 0).
``simple_crypto_v3``             defaults   none, 100k Under spread's settings bob and alice learned
                                                       nothing (-0.8 against 24.7).
``simple_push_v3``               defaults   none, 150k -11.9/-11.6 against -13.1/-13.0 (seeds 0/1).
================================ ========== ========== ==================================================

pettingzoo:classic.tictactoe_v3 (``_board_game``): self-play, one module for both players at the PPO
defaults, judged against a random player (bench/RESULTS.md has the measured runs):

====================================== ===================== =============================================
Field                                  Value                 Why
====================================== ===================== =============================================
``evaluation``                         every 5 iterations,   The self-play rates say which seat wins, not
                                       200 games against     how well the policy plays; 200 games put the
                                       ``"random"``          rates within about 3 points.
``stop_on``, ``target_return``         evaluation, 0.75      Wins minus losses against the random player.
                                                             Self-play drifts towards draws against itself
                                                             and away from punishing a random player (seed
                                                             0 without a stop: 89% won at 20k env steps,
                                                             70% at 150k), so the run stops when an
                                                             evaluation is good; 3 of 3 seeds reached
                                                             0.75 (20k-72k env steps). The best any policy
                                                             can do is about 0.97.
``max_env_steps``                      150,000               Twice the slowest seed.
``ppo``, ``env_runner``                the defaults          Those of the self-play example (lr 1e-3,
                                                             entropy 0.01, 8 sub-envs x 128) reached the
                                                             same rates no sooner at seed 0 and swung more.
====================================== ===================== =============================================

pettingzoo:classic.connect_four_v3: the same, with the self-play example's settings (``tuned``):
at seed 0 they won 92-96% against the random player from 20k env steps where the defaults stayed at
80-92% over 300k. Both drift down later, so the run stops at a return of 0.8 (90% won; there are
no draws against a random player): 3 of 3 seeds within 20k-51k env steps; a budget of 150,000.

>>> from ray_sampler.sampling.config import EnvRunnerConfig
>>> cfg = ppo_preset("Pendulum-v1", PPOTrainingConfig(env_runner=EnvRunnerConfig(env="Pendulum-v1")))
>>> cfg.ppo.gamma, cfg.target_return, cfg.max_iterations
(0.95, -300.0, 195)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from learner.frameworks import module_framework, require_torch
from learner.train import PPOTrainingConfig, StopOn
from ray_sampler.sampling.env_creator import pettingzoo_name

__all__ = ["PRESET_ENVS", "has_preset", "ppo_preset"]


def _pendulum(base: PPOTrainingConfig) -> PPOTrainingConfig:
    module_config = dict(base.env_runner.module_config)
    if base.env_runner.module_class is None:  # the built-in MLPModule takes initial_log_std
        module_config = {"initial_log_std": 0.0, **module_config}
    runner = dataclasses.replace(
        base.env_runner,
        num_envs_per_env_runner=4,
        rollout_fragment_length=256,
        normalize_actions=True,
        module_config=module_config,
    )
    ppo = dataclasses.replace(
        base.ppo,
        lr=3e-4,
        gamma=0.95,
        lambda_=0.1,
        num_epochs=6,
        minibatch_size=64,
        entropy_coeff=0.0,
        vf_clip_param=10.0,
        grad_clip=None,
    )
    return dataclasses.replace(base, env_runner=runner, ppo=ppo, max_iterations=195, target_return=-300.0)


def _stateless_cartpole(base: PPOTrainingConfig) -> PPOTrainingConfig:
    runner = base.env_runner
    if runner.module_class is None or module_framework(runner.module_class) == "numpy":  # a built-in MLP
        require_torch()  # a clear error without the torch extra
        from ray_sampler.modules.torch_lstm import TorchLSTMModule  # imports torch: only for this preset

        seed = {"seed": runner.seed} if runner.seed is not None else {}
        runner = dataclasses.replace(runner, module_class=TorchLSTMModule, module_config=seed)
    runner = dataclasses.replace(runner, rollout_fragment_length=256)
    ppo = dataclasses.replace(
        base.ppo,
        lr=3e-4,
        lambda_=1.0,
        clip_param=0.3,
        vf_clip_param=10.0,
        num_epochs=6,
        vf_coeff=0.05,
        grad_clip=None,
        observation_filter="mean_std",
        max_seq_len=20,
    )
    return dataclasses.replace(
        base, env_runner=runner, ppo=ppo, framework="torch", max_iterations=None, max_env_steps=300_000,
        target_return=350.0,
    )  # fmt: skip


def _mpe(
    target_return: float | None, max_env_steps: int, *, tuned: bool = True
) -> Callable[[PPOTrainingConfig], PPOTrainingConfig]:
    """An MPE scenario's preset: ``tuned``, simple_spread's settings (8 sub-envs x 125 steps per
    runner, lr 3e-4, 6 epochs of 256-row minibatches), else the PPO defaults; a target (None: the
    budget is used) and a budget in env steps."""

    def preset(base: PPOTrainingConfig) -> PPOTrainingConfig:
        if tuned:
            runner = dataclasses.replace(base.env_runner, num_envs_per_env_runner=8, rollout_fragment_length=125)
            ppo = dataclasses.replace(base.ppo, lr=3e-4, num_epochs=6, minibatch_size=256)
            base = dataclasses.replace(base, env_runner=runner, ppo=ppo)
        return dataclasses.replace(base, max_iterations=None, max_env_steps=max_env_steps, target_return=target_return)

    return preset


_simple_spread = _mpe(-61.5, 150_000)


def _board_game(
    target_return: float, max_env_steps: int, *, tuned: bool = False
) -> Callable[[PPOTrainingConfig], PPOTrainingConfig]:
    """A two-player board game's preset: self-play with one module (the default), measured and
    stopped by its evaluations against the random opponent; ``tuned``: the self-play example's
    settings (8 sub-envs x 128 steps per runner, lr 1e-3, entropy 0.01, 6 epochs of 256)."""

    def preset(base: PPOTrainingConfig) -> PPOTrainingConfig:
        evaluation = dataclasses.replace(
            base.evaluation, evaluation_interval=5, evaluation_duration=200, evaluation_opponent="random"
        )
        if tuned:
            runner = dataclasses.replace(base.env_runner, num_envs_per_env_runner=8, rollout_fragment_length=128)
            ppo = dataclasses.replace(base.ppo, lr=1e-3, entropy_coeff=0.01, num_epochs=6, minibatch_size=256)
            base = dataclasses.replace(base, env_runner=runner, ppo=ppo)
        return dataclasses.replace(
            base,
            evaluation=evaluation,
            stop_on=StopOn.EVALUATION,
            target_return=target_return,
            max_iterations=None,
            max_env_steps=max_env_steps,
        )

    return preset


SIMPLE_SPREAD = "pettingzoo:mpe2.simple_spread_v3"
TICTACTOE = "pettingzoo:classic.tictactoe_v3"
CONNECT_FOUR = "pettingzoo:classic.connect_four_v3"

_PRESETS: dict[str, Callable[[PPOTrainingConfig], PPOTrainingConfig]] = {
    "Pendulum-v1": _pendulum,
    "StatelessCartPole-v1": _stateless_cartpole,
    SIMPLE_SPREAD: _simple_spread,
    "pettingzoo:mpe2.simple_v3": _mpe(-10.0, 50_000, tuned=False),
    "pettingzoo:mpe2.simple_speaker_listener_v4": _mpe(-36.0, 100_000),
    "pettingzoo:mpe2.simple_reference_v3": _mpe(-45.0, 150_000),
    "pettingzoo:mpe2.simple_adversary_v3": _mpe(None, 100_000),
    "pettingzoo:mpe2.simple_tag_v3": _mpe(None, 150_000),
    "pettingzoo:mpe2.simple_crypto_v3": _mpe(None, 100_000, tuned=False),
    "pettingzoo:mpe2.simple_push_v3": _mpe(None, 150_000, tuned=False),
    TICTACTOE: _board_game(0.75, 150_000),
    CONNECT_FOUR: _board_game(0.8, 150_000, tuned=True),
}

PRESET_ENVS: tuple[str, ...] = tuple(_PRESETS)
"""The env names that have a preset (as ``--env`` gives them; a PettingZoo env also by its short
name, ``pettingzoo:tictactoe_v3``)."""


def has_preset(env_id: str) -> bool:
    """Whether ``env_id`` (a PettingZoo env by either of its names) has a preset."""
    return pettingzoo_name(env_id) in _PRESETS


def ppo_preset(env_id: str, base: PPOTrainingConfig) -> PPOTrainingConfig:
    """``base`` with the preset of ``env_id`` applied; ``base`` itself for an env without one
    (:data:`PRESET_ENVS` lists those that have one)."""
    preset = _PRESETS.get(pettingzoo_name(env_id))
    return base if preset is None else preset(base)
