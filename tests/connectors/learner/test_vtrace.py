"""V-trace against a reference written from the IMPALA paper's equations (the explicit sums, not the
recursion the implementation uses), on random chunks that terminate, are truncated or are cut; the
on-policy case equals the n-step return; a truncation bootstraps and a terminal does not; the
clipping constants do what the paper says. The learner piece on a runner's chunks: on-policy it
gives GAE's lambda-1 targets, off-policy what ``vtrace`` gives on the target module's numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from connectors.learner import AddColumnsFromEpisodesToTrainBatch, GeneralAdvantageEstimation
from connectors.learner.learner_piece import DEFAULT_MODULE_ID
from connectors.learner.vtrace import LOG_RHOS, VTraceAdvantages, vtrace
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner

TOL = 1e-12  # float64 sums and products in another order than the reference's


def random_chunks(seed: int, n: int = 12) -> tuple[ColumnarEpisodes, dict[str, np.ndarray]]:
    """``n`` chunks of 1-9 steps, each terminated, truncated or cut; per step a reward, V(x_t),
    V(x_{t+1}) (0 after a terminal) and a log ratio in [-2, 2]."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        length = int(rng.integers(1, 10))
        end = rng.choice(["terminated", "truncated", "cut"])
        episodes.append(
            SingleAgentEpisode(
                observations=list(range(length + 1)), actions=[0] * length, rewards=[0.0] * length,
                terminated=end == "terminated", truncated=end == "truncated",
            )
        )  # fmt: skip
    col = episodes_to_columnar(episodes)
    steps = int(col.lens.sum())
    obs_values = [rng.normal(size=int(length) + 1) for length in col.lens]  # V of each chunk's observations
    values = np.concatenate([v[:-1] for v in obs_values])
    next_values = np.concatenate(
        [np.where(np.arange(len(v) - 1) == len(v) - 2, 0.0 if term else v[-1], v[1:])
         for v, term in zip(obs_values, col.terminated, strict=True)]
    )  # fmt: skip
    data = {
        "rewards": rng.normal(size=steps),
        "values": values,
        "next_values": next_values,
        "log_rhos": rng.uniform(-2, 2, steps),
    }
    return col, data


def reference(
    col: ColumnarEpisodes, data: dict[str, np.ndarray], gamma: float, rho_bar: float, c_bar: float
) -> tuple[np.ndarray, np.ndarray]:
    """The paper's eq. (1), v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) rho_t delta_t, and its
    advantage rho_s (r_s + gamma v_{s+1} - V(x_s)), chunk by chunk with plain loops."""
    vs_all, adv_all = [], []
    start = 0
    for length in col.lens:
        sl = slice(start, start + int(length))
        r, v, nv = data["rewards"][sl], data["values"][sl], data["next_values"][sl]
        ratio = np.exp(data["log_rhos"][sl])
        rho, c = np.minimum(rho_bar, ratio), np.minimum(c_bar, ratio)
        n = int(length)
        vs = np.zeros(n)
        for s in range(n):
            total, trace = 0.0, 1.0
            for t in range(s, n):
                total += gamma ** (t - s) * trace * rho[t] * (r[t] + gamma * nv[t] - v[t])
                trace *= c[t]
            vs[s] = v[s] + total
        vs_next = np.append(vs[1:], nv[-1])
        vs_all.append(vs)
        adv_all.append(rho * (r + gamma * vs_next - v))
        start += n
    return np.concatenate(vs_all), np.concatenate(adv_all)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("gamma", "rho_bar", "c_bar"), [(0.99, 1.0, 1.0), (0.9, 2.0, 0.5), (0.5, 0.7, 0.7)])
def test_equals_the_papers_sums_on_random_chunks(seed: int, gamma: float, rho_bar: float, c_bar: float) -> None:
    col, data = random_chunks(seed)
    vs, adv = vtrace(**data, col=col, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar)
    want_vs, want_adv = reference(col, data, gamma, rho_bar, c_bar)
    np.testing.assert_allclose(vs, want_vs, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(adv, want_adv, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("seed", [0, 1])
def test_on_policy_the_targets_are_the_n_step_returns(seed: int) -> None:
    """Every ratio 1: v_s = r_s + gamma r_{s+1} + ... + gamma^(n-s) V(x_end+1), the bootstrap 0 after
    a terminal; the advantage is that return minus V(x_s)."""
    col, data = random_chunks(seed)
    data["log_rhos"] = np.zeros_like(data["log_rhos"])
    gamma = 0.9
    vs, adv = vtrace(**data, col=col, gamma=gamma, rho_bar=1.5, c_bar=1.0)
    returns, start = [], 0
    for length in col.lens:
        r, nv = data["rewards"][start : start + length], data["next_values"][start : start + length]
        for s in range(length):
            tail = gamma ** (length - s) * nv[-1]
            returns.append(sum(gamma ** (t - s) * r[t] for t in range(s, length)) + tail)
        start += length
    np.testing.assert_allclose(vs, returns, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(adv, np.asarray(returns) - data["values"], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("truncated", [True, False])
def test_a_truncation_bootstraps_and_a_terminal_does_not(truncated: bool) -> None:
    ep = SingleAgentEpisode(
        observations=[0, 1, 2], actions=[0, 0], rewards=[1.0, 1.0], terminated=not truncated, truncated=truncated
    )
    col = episodes_to_columnar([ep])
    bootstrap = 10.0 if truncated else 0.0  # V(x_2), as the learner passes it: 0 after a terminal
    values = np.array([3.0, 4.0])
    vs, _ = vtrace(rewards=np.ones(2), values=values, next_values=np.array([4.0, bootstrap]),
                   log_rhos=np.zeros(2), col=col, gamma=0.5)  # fmt: skip
    assert vs.tolist() == pytest.approx([1 + 0.5 * (1 + 0.5 * bootstrap), 1 + 0.5 * bootstrap], abs=TOL)


def test_clipping_the_ratios_at_one_makes_large_ratios_count_as_on_policy() -> None:
    """Every ratio above both bounds, clipped at 1: the same targets as on-policy; with c_bar at 0.5 the
    correction of a later step reaches back shrunk by 0.5 per step; rho_bar scales each step's delta."""
    col, data = random_chunks(3)
    on_policy = vtrace(**{**data, "log_rhos": np.zeros_like(data["log_rhos"])}, col=col, gamma=0.9)
    big = {**data, "log_rhos": np.full_like(data["log_rhos"], 1.5)}  # ratio e^1.5, about 4.5
    clipped = vtrace(**big, col=col, gamma=0.9, rho_bar=1.0, c_bar=1.0)
    for a, b in zip(clipped, on_policy, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)
    # A one-step chunk has no trace: only rho_bar acts on it, scaling its delta.
    one = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[2.0], truncated=True)
    args = {"rewards": np.array([2.0]), "values": np.array([1.0]), "next_values": np.array([3.0])}
    vs, adv = vtrace(**args, log_rhos=np.array([1.5]), col=episodes_to_columnar([one]), gamma=0.5, rho_bar=0.5)
    delta = 2.0 + 0.5 * 3.0 - 1.0
    assert (vs[0], adv[0]) == pytest.approx((1.0 + 0.5 * delta, 0.5 * delta), abs=TOL)
    # c_bar: in a two-step chunk the second step's delta reaches the first times gamma * c_0.
    two = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[0.0, 1.0], truncated=True)
    args = {"rewards": np.array([0.0, 1.0]), "values": np.zeros(2), "next_values": np.zeros(2)}
    for c_bar in (1.0, 0.5, 0.25):
        vs, _ = vtrace(**args, log_rhos=np.full(2, 1.5), col=episodes_to_columnar([two]), gamma=1.0, c_bar=c_bar)
        assert vs.tolist() == pytest.approx([c_bar * 1.0, 1.0], abs=TOL)


@pytest.mark.parametrize(("field", "value"), [("rho_bar", 0.0), ("c_bar", -1.0), ("gamma", 1.5)])
def test_bad_constants_name_the_field(field: str, value: float) -> None:
    col, data = random_chunks(0, n=1)
    kwargs = {"gamma": 0.9, field: value}
    with pytest.raises(ConfigError, match=rf"^'{field}' must be "):
        vtrace(**data, col=col, **kwargs)


# -- the learner piece -------------------------------------------------------------------------------


def cartpole_chunks() -> tuple[Any, list[SingleAgentEpisode]]:
    """A runner's module and truncate-mode chunks (cut, terminated, continuing) it sampled."""
    runner = EnvRunner(
        EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=3, rollout_fragment_length=40, seed=2)
    )
    return runner.module, runner.sample() + runner.sample()


def piece_batch(module: Any, chunks: list[SingleAgentEpisode], **kwargs: Any) -> dict[str, np.ndarray]:
    pipeline = ConnectorPipelineV2([AddColumnsFromEpisodesToTrainBatch(), VTraceAdvantages(**kwargs)])
    return pipeline(rl_module=module, batch={}, episodes=chunks, shared_data={})[DEFAULT_MODULE_ID]


def test_the_piece_on_policy_gives_gaes_lambda_1_targets() -> None:
    """The sampling module as the target: every ratio 1 (to float32 rounding), so v_s is the n-step
    return, GAE's value target with lambda 1, bootstrapped alike at cuts and time limits."""
    module, chunks = cartpole_chunks()
    out = piece_batch(module, chunks, gamma=0.97)
    np.testing.assert_allclose(out[LOG_RHOS], 0.0, atol=1e-5)
    gae_pipeline = ConnectorPipelineV2(
        [AddColumnsFromEpisodesToTrainBatch(), GeneralAdvantageEstimation(gamma=0.97, lambda_=1.0)]
    )
    want = gae_pipeline(rl_module=module, batch={}, episodes=chunks, shared_data={})[DEFAULT_MODULE_ID]
    np.testing.assert_allclose(out[Columns.VALUE_TARGETS], want[Columns.VALUE_TARGETS], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[Columns.VF_PREDS], want[Columns.VF_PREDS], rtol=1e-12, atol=1e-12)


def test_the_piece_off_policy_equals_vtrace_on_the_targets_log_probabilities() -> None:
    """Another module as the target: its log-probabilities of the stored actions against the stored
    ones, its values, the chunks' rewards and bootstraps, through ``vtrace`` directly."""
    behaviour, chunks = cartpole_chunks()
    target = MLPModule(behaviour.observation_space, behaviour.action_space, seed=9)
    state = target.get_state()  # a policy far from uniform (a new MLP's is near it)
    state["pi.2.w"] = np.random.default_rng(0).normal(0, 1, state["pi.2.w"].shape).astype(np.float32)
    target.set_state(state)
    out = piece_batch(target, chunks, gamma=0.97, rho_bar=1.2, c_bar=0.8)
    col = episodes_to_columnar(chunks)
    values, next_values = [], []
    for ep in chunks:  # per chunk: V of each observation; 0 after a terminal
        v = target.compute_values(np.asarray(ep.get_observations(slice(0, None))))
        values += list(v[:-1])
        next_values += [*v[1:-1], 0.0 if ep.is_terminated else v[-1]]
    obs = np.concatenate([np.asarray(ep.get_observations(slice(0, len(ep)))) for ep in chunks])
    actions = np.concatenate([np.asarray(ep.get_actions(slice(0, None))) for ep in chunks])
    stored = np.concatenate(
        [np.asarray(ep.get_extra_model_outputs(Columns.ACTION_LOGP, slice(0, None))) for ep in chunks]
    )
    logits = target.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS].astype(np.float64)
    logp = logits[np.arange(len(actions)), actions] - np.log(np.exp(logits).sum(axis=1))
    assert np.abs(logp - stored).max() > 0.01  # the target is another policy
    vs, adv = vtrace(rewards=col.data.rewards, values=np.array(values), next_values=np.array(next_values),
                     log_rhos=logp - stored, col=col, gamma=0.97, rho_bar=1.2, c_bar=0.8)  # fmt: skip
    # The module's float32 outputs went through BLAS on other batch shapes here: 1e-6.
    np.testing.assert_allclose(out[LOG_RHOS], logp - stored, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[Columns.VALUE_TARGETS], vs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[Columns.ADVANTAGES], adv, rtol=1e-6, atol=1e-6)


def test_the_piece_refuses_a_stateful_module_and_a_batch_without_columns() -> None:
    from tests.ray_sampler.sampling.counter_module import CounterModule

    module, chunks = cartpole_chunks()
    with pytest.raises(
        ConfigError, match=r"^V-trace takes stateless modules for now \(got the stateful CounterModule\)"
    ):
        piece_batch(CounterModule(module.observation_space, module.action_space), chunks)
    alone = ConnectorPipelineV2([VTraceAdvantages()])
    with pytest.raises(ConfigError, match=r"needs \['obs', 'actions', 'action_logp'\] in the batch"):
        alone(rl_module=module, batch={}, episodes=chunks, shared_data={})
