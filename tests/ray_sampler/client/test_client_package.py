"""The client package stands alone: it imports no Ray, no gymnasium and nothing else of the library,
so a simulator can copy it into its own code; its local policy acts as the server's module."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.client import LocalPolicy
from ray_sampler.client.protocol import encode_array
from ray_sampler.data.columns import Columns
from ray_sampler.modules.distributions import dist_class_for
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_runner import ExternalEnvRunner
from ray_sampler.sampling.external_values import space_message

CLIENT = Path(__file__).resolve().parents[3] / "ray_sampler" / "client"


def test_importing_the_client_loads_no_ray_and_no_gymnasium() -> None:
    code = "import sys, ray_sampler.client; print(sorted(m.split('.')[0] for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not {"ray", "gymnasium", "torch", "pyarrow"} & set(eval(out))


def test_a_copy_of_the_package_under_another_name_plays_against_a_server(tmp_path: Path) -> None:
    shutil.copytree(CLIENT, tmp_path / "simclient", ignore=shutil.ignore_patterns("__pycache__"))
    runner = ExternalEnvRunner(
        EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=5, external=ExternalConfig(port=0)), worker_index=1
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import simclient\n"
        "c = simclient.PolicyClient(sys.argv[2]); e = c.start_episode()\n"
        "for t in range(5):\n"
        "    c.get_action(e, [0.01 * t, 0.0, 0.0, 0.0]); c.log_returns(e, 1.0)\n"
        "c.end_episode(e, [0.05, 0.0, 0.0, 0.0]); c.close()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'gymnasium', 'ray_sampler'}))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path), runner.address()], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"
        (chunk,) = runner.sample(num_timesteps=5, timeout_s=30)
        assert [float(o[0]) for o in chunk.get_observations()] == pytest.approx([0.01 * t for t in range(6)])
        assert chunk.is_terminated
    finally:
        runner.stop()


@pytest.mark.parametrize(
    "action_space",
    [gym.spaces.Discrete(3, start=1), gym.spaces.Box(-2.0, 2.0, (2,), np.float32)],
    ids=["discrete", "box"],
)
def test_the_local_policys_log_probabilities_are_the_modules(action_space: gym.Space) -> None:
    obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    module = MLPModule(obs_space, action_space, hidden_sizes=(8, 8), seed=3, initial_log_std=-0.5)
    weights = {
        "weights_version": 2,
        "module": {"kind": "mlp", "activation": "tanh", "gaussian": module.is_gaussian},
        "weights": {k: encode_array(v) for k, v in module.get_state().items()},
    }
    policy = LocalPolicy(weights, space_message(action_space, "action_space"), seed=0)
    obs = np.random.default_rng(1).uniform(-1, 1, (20, 4)).astype(np.float32)
    inputs = module.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    offset = 1 if isinstance(action_space, gym.spaces.Discrete) else 0
    for row, o in zip(inputs, obs):
        action, logp = policy.compute(o)
        expected = dist_class_for(action_space)(row[None]).logp(np.asarray(action)[None] - offset)[0]
        assert logp == pytest.approx(float(expected), abs=1e-5)
        assert action_space.contains(np.asarray(action, action_space.dtype)) or not offset
    greedy, _ = policy.compute(obs[0], explore=False)
    assert np.allclose(greedy, dist_class_for(action_space)(inputs[:1]).deterministic()[0] + offset, atol=1e-5)
