"""StepRecorder: one StepRecord per vector step, the batched observation kept for the next one."""

from __future__ import annotations

import numpy as np

from connectors.env_to_module import default_env_to_module
from connectors.module_to_env import default_module_to_env
from ray_sampler.modules import MLPModule, RandomModule
from ray_sampler.sampling.recorder import StepRecorder
from ray_sampler.sampling.vector import VectorStepper
from tests.helpers import stamp_vector_env


def recorder(num_envs: int = 2) -> StepRecorder:
    env = stamp_vector_env(num_envs, "NextStep")
    obs_space, act_space = env.single_observation_space, env.single_action_space
    return StepRecorder(
        VectorStepper(env),
        module=MLPModule(obs_space, act_space, seed=0),
        random_module=RandomModule(obs_space, act_space, seed=1),
        env_to_module=default_env_to_module(obs_space, ()),
        module_to_env=default_module_to_env(act_space, (), seed=2),
    )


def test_reset_gives_each_sub_env_its_observation_and_info() -> None:
    rec = recorder()
    obs, infos = rec.reset(None)
    assert [o.tolist() for o in obs] == [[0, 0, 0, 0], [0, 1, 0, 0]] and infos == [{"episode": 0}, {"episode": 0}]
    assert rec.vector_obs.tolist() == [[0, 0, 0, 0], [0, 1, 0, 0]]


def test_record_steps_every_sub_env_and_keeps_module_outputs() -> None:
    rec = recorder()
    rec.reset(None)
    for random_actions in (False, True):
        r = rec.record([], explore=True, random_actions=random_actions)
        assert r.valid.tolist() == [True, True] and np.asarray(r.actions).shape == (2,)
        assert set(r.extras) == {"action_dist_inputs", "vf_preds", "action_logp"}
        assert rec.vector_obs.tolist() == np.asarray(r.step.current_obs).tolist()
    assert rec.vector_obs[:, 3].tolist() == [2, 2]
