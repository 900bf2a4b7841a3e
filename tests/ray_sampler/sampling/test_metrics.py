"""RunnerMetrics, GroupMetrics and the per-episode totals carried across chunks."""

from __future__ import annotations

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.metrics import EpisodeTotals, GroupMetrics, RunnerMetrics, chunk_totals


def test_totals_sum_an_episode_over_its_chunks_until_it_ends() -> None:
    totals = EpisodeTotals()
    assert totals.add([("a", 1.0, 1, False), ("b", 2.0, 2, True)]) == ([2.0], [2], 3)
    assert totals.num_running == 1
    assert totals.add([("a", 3.0, 2, True)]) == ([4.0], [3], 2)
    assert totals.num_running == 0


def test_forgotten_episodes_start_from_zero() -> None:
    totals = EpisodeTotals()
    totals.add([("a", 1.0, 1, False)])
    totals.forget({"a", "never-seen"})
    assert totals.add([("a", 5.0, 1, True)]) == ([5.0], [1], 1)


def test_chunk_totals_agree_for_episodes_and_their_columnar_form() -> None:
    done = SingleAgentEpisode("x", observations=[0, 1, 2], actions=[0, 1], rewards=[0.5, 1.5], terminated=True)
    running = SingleAgentEpisode("y", observations=[0, 1], actions=[1], rewards=[2.0])
    expected = [("x", 2.0, 2, True), ("y", 2.0, 1, False)]
    assert list(chunk_totals([done, running])) == expected
    assert list(chunk_totals(episodes_to_columnar([done, running]))) == expected
    assert list(chunk_totals(None)) == []


def test_group_metrics_of_answers() -> None:
    answers = [
        RunnerMetrics(worker_index=1, num_env_steps=8, episode_returns=[1.0], episode_lengths=[3], weights_version=2),
        RunnerMetrics(worker_index=2, num_env_steps=8, episode_returns=[3.0], episode_lengths=[5], weights_version=3),
        RunnerMetrics(worker_index=None, num_env_steps=2, num_env_steps_per_s=0.0),
    ]
    m = GroupMetrics.of(answers, weights_version=3, late_runners=[4], num_dropped_by_scale=1)
    assert (m.num_env_steps, m.num_episodes, m.episode_return_mean) == (18, 2, 2.0)
    assert m.episode_returns == [1.0, 3.0] and m.episode_lengths == [3, 5]
    assert m.num_runners_answered == 3 and m.late_runners == [4] and m.num_episodes_dropped_by_scale == 1
    assert m.weights_versions == {1: 2, 2: 3} and m.max_policy_lag == 3
    assert m.runner_env_steps_per_s == {1: 0.0, 2: 0.0}


def test_metrics_default_to_an_empty_call() -> None:
    assert GroupMetrics().episode_return_mean is None and GroupMetrics().max_policy_lag == 0
    m = RunnerMetrics()
    assert (m.num_env_steps, m.episode_returns, m.request, m.replay) == (0, [], None, None)


SUB_ENV_ANSWERS = [
    RunnerMetrics(worker_index=1, num_env_steps=8),
    RunnerMetrics(worker_index=2, num_sub_env_restarts=3, num_env_steps_dropped=87, num_episodes_dropped_env_error=3),
    RunnerMetrics(worker_index=3, num_sub_env_restarts=1, num_env_steps_dropped=1, num_episodes_dropped_env_error=1),
]


def test_group_metrics_sum_the_answers_sub_env_failures() -> None:
    m = GroupMetrics.of(SUB_ENV_ANSWERS, weights_version=0, late_runners=[], num_dropped_by_scale=0)
    assert (m.num_sub_env_restarts, m.num_env_steps_dropped, m.num_episodes_dropped_env_error) == (4, 88, 4)


def test_group_metrics_give_one_line_per_runner_with_sub_env_restarts() -> None:
    m = GroupMetrics.of(SUB_ENV_ANSWERS, weights_version=0, late_runners=[], num_dropped_by_scale=0)
    assert m.sub_env_failures == [
        "runner 2: 3 sub-env restarts; 87 env steps and 3 episodes dropped",
        "runner 3: 1 sub-env restart; 1 env step and 1 episode dropped",
    ]


def test_group_metrics_count_the_runners_whose_call_fell_back_to_the_per_step_engine() -> None:
    reason = "connector pieces ['plain_piece'] do not keep the vectorized engine's contract"
    answers = [
        RunnerMetrics(worker_index=1, vectorized_fallback=reason),
        RunnerMetrics(worker_index=2),
        RunnerMetrics(worker_index=3, vectorized_fallback=reason),
    ]
    m = GroupMetrics.of(answers, weights_version=0, late_runners=[], num_dropped_by_scale=0)
    assert m.num_runners_fallback == 2
    none = GroupMetrics.of(answers[1:2], weights_version=0, late_runners=[], num_dropped_by_scale=0)
    assert none.num_runners_fallback == 0
