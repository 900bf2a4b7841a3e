"""Tests of ray_sampler/cli/export.py: ONNX and npz exports against ``Policy.compute_actions``, the
MeanStdFilter folded in, what is refused, and ``ray-sampler export`` run in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest

from connectors.common.mean_std_filter import MeanStdFilter
from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
from ray_sampler.cli import main
from ray_sampler.cli.export import (
    FILTER_FORMAT,
    MAPPING_FILE,
    NPZ_FORMAT,
    ONNX_FORMAT,
    default_out,
    export_npz,
    export_onnx,
)
from ray_sampler.errors import ConfigError
from ray_sampler.modules import MLPModule, QModule
from ray_sampler.modules.torch_mlp import TorchMLPModule
from ray_sampler.policy import MultiAgentPolicy, Policy

ROOT = Path(__file__).resolve().parents[3]
CARTPOLE = gym.make("CartPole-v1").observation_space
PENDULUM = gym.make("Pendulum-v1").observation_space
PENDULUM_ACTIONS = gym.make("Pendulum-v1").action_space
NUM_OBS = 1000
LOGITS_ATOL = 1e-5
"""ONNX Runtime's float32 matrix products round in other places than torch's (or numpy's)."""


def _random_weights(policy: Policy, seed: int, scale: float = 0.5) -> Policy:
    """``policy`` with normal random weights (a trained policy's logits are far from the initial 0.01 gain's)."""
    rng = np.random.default_rng(seed)
    state = policy.module.get_state()
    weights = {k: (scale * rng.standard_normal(np.shape(v))).astype(np.float32) for k, v in state.items()}
    policy.module.set_state({k: state[k] if k == "epsilon" else w for k, w in weights.items()})
    return policy


def _filter_samples(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of CartPole-like observations: what the runners agreed on (global), what this copy saw since (local)."""
    rng = np.random.default_rng(seed)
    scale = np.array([0.5, 2.0, 0.1, 3.0])
    agreed = np.array([0.3, -1.0, 0.05, 0.5]) + scale * rng.standard_normal((200, 4))
    since = np.array([0.1, 0.5, -0.02, 1.0]) + scale * rng.standard_normal((50, 4))
    return agreed, since


def _moments(x: np.ndarray) -> dict[str, Any]:
    return {"count": float(len(x)), "mean": x.mean(axis=0), "m2": ((x - x.mean(axis=0)) ** 2).sum(axis=0)}


def _cartpole_torch_policy() -> Policy:
    """A torch CartPole policy whose MeanStdFilter holds global and local moments of known samples."""
    policy = Policy.build(
        TorchMLPModule,
        observation_space=CARTPOLE,
        action_space=gym.spaces.Discrete(2),
        module_config={"hidden_sizes": (32, 32), "seed": 0},
        env_to_module_connectors=(MeanStdFilter(),),
    )
    agreed, since = _filter_samples(seed=1)
    policy.env_to_module_connectors[0].set_state({"global": _moments(agreed), "local": _moments(since)})
    return _random_weights(policy, seed=2)


def _cartpole_obs(seed: int) -> np.ndarray:
    """Observations around the filter's moments, one in 50 far enough out to be clipped at 10 std."""
    rng = np.random.default_rng(seed)
    obs = np.array([0.3, -1.0, 0.05, 0.5]) + np.array([1.5, 6.0, 0.3, 9.0]) * rng.standard_normal((NUM_OBS, 4))
    obs[::50] *= 60.0
    return obs.astype(np.float32)


def _run(model: Path, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits, actions = session.run(["logits", "actions"], {"obs": np.asarray(obs, np.float32)})
    return logits, actions


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Policy, list[Path]]:
    policy = _cartpole_torch_policy()
    return policy, export_onnx(policy, tmp_path_factory.mktemp("cartpole") / "policy.onnx")


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> tuple[Policy, list[Path]]:
    policy = Policy.build(
        TorchMLPModule,
        observation_space=PENDULUM,
        action_space=PENDULUM_ACTIONS,
        module_config={"hidden_sizes": (32, 32), "seed": 0},
    )
    policy = _random_weights(policy, seed=3)
    return policy, export_onnx(policy, tmp_path_factory.mktemp("pendulum") / "policy.onnx")


def _pendulum_obs(seed: int) -> np.ndarray:
    space = gym.spaces.Box(PENDULUM.low, PENDULUM.high, seed=seed)
    return np.stack([space.sample() for _ in range(NUM_OBS)])


class TestOnnx:
    def test_discrete_actions_equal_compute_actions_with_the_filter_folded_in(
        self, cartpole: tuple[Policy, list[Path]]
    ) -> None:
        policy, files = cartpole
        obs = _cartpole_obs(seed=4)
        logits, actions = _run(files[0], obs)
        assert actions.dtype == np.int64
        assert np.array_equal(actions, policy.compute_actions(obs))
        normalized = policy.env_to_module_connectors[0].normalize(obs)
        want = policy.module.forward_inference({"obs": normalized})["action_dist_inputs"]
        np.testing.assert_allclose(logits, want, rtol=0, atol=LOGITS_ATOL)
        assert {0, 1} <= set(actions.tolist())

    def test_filter_json_holds_the_moments_of_every_sample_seen(self, cartpole: tuple[Policy, list[Path]]) -> None:
        _, files = cartpole
        assert [f.name for f in files] == ["policy.onnx", "policy.filter.json"]
        saved = json.loads(files[1].read_text())
        seen = np.concatenate(_filter_samples(seed=1))
        assert saved["format"] == FILTER_FORMAT
        assert saved["folded_into"] == "policy.onnx"
        assert (saved["type"], saved["count"], saved["is_applied"]) == ("MeanStdFilter", 250.0, True)
        assert (saved["clip"], saved["epsilon"]) == (10.0, 1e-8)
        np.testing.assert_allclose(saved["mean"], seen.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(saved["std"], seen.std(axis=0), rtol=1e-12)

    def test_box_actions_are_the_clipped_means_of_compute_actions(self, pendulum: tuple[Policy, list[Path]]) -> None:
        policy, files = pendulum
        assert [f.name for f in files] == ["policy.onnx"]
        obs = _pendulum_obs(seed=5)
        logits, actions = _run(files[0], obs)
        want = policy.compute_actions(obs)
        assert actions.dtype == np.float32
        assert actions.shape == (NUM_OBS, 1)
        np.testing.assert_allclose(actions, want, rtol=0, atol=LOGITS_ATOL)
        np.testing.assert_allclose(
            logits, policy.module.forward_inference({"obs": obs})["action_dist_inputs"], atol=1e-5
        )
        assert (np.abs(want) == 2.0).any()  # some means fell outside [-2, 2] and were clipped
        assert (np.abs(want) < 2.0).any()

    def test_batch_size_is_free(self, pendulum: tuple[Policy, list[Path]]) -> None:
        policy, files = pendulum
        obs = _pendulum_obs(seed=6)[:1]
        np.testing.assert_allclose(_run(files[0], obs)[1], policy.compute_actions(obs), atol=LOGITS_ATOL)

    def test_metadata_names_the_format_and_spaces(self, cartpole: tuple[Policy, list[Path]]) -> None:
        _, files = cartpole
        meta = ort.InferenceSession(str(files[0]), providers=["CPUExecutionProvider"]).get_modelmeta()
        props = meta.custom_metadata_map
        assert props["format"] == ONNX_FORMAT
        assert props["module_class"] == "ray_sampler.modules.torch_mlp:TorchMLPModule"
        assert json.loads(props["action_space"]) == {"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"}
        low = json.loads(props["observation_space"])["low"]
        assert low == [float(np.float32(-4.8)), "-inf", float(np.float32(-0.41887903)), "-inf"]
        assert props["filter"] == "MeanStdFilter folded in: policy.filter.json"


def _docs_snippet() -> str:
    """The numpy evaluator in docs/export.md: its python block that defines ``act``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "export.md").read_text(), flags=re.S)
    (snippet,) = [b for b in blocks if "def act(" in b]
    return snippet


def _numpy_cartpole() -> Policy:
    policy = Policy.build(
        MLPModule,
        observation_space=CARTPOLE,
        action_space=gym.spaces.Discrete(2),
        module_config={"hidden_sizes": (32, 32)},
        env_to_module_connectors=(MeanStdFilter(),),
    )
    agreed, since = _filter_samples(seed=1)
    policy.env_to_module_connectors[0].set_state({"global": _moments(agreed), "local": _moments(since)})
    return _random_weights(policy, seed=7)


def _numpy_pendulum() -> Policy:
    policy = Policy.build(
        MLPModule, observation_space=PENDULUM, action_space=PENDULUM_ACTIONS, module_config={"hidden_sizes": (32,)}
    )
    return _random_weights(policy, seed=8)


def _numpy_pendulum_normalized() -> Policy:
    policy = Policy.build(
        MLPModule,
        observation_space=PENDULUM,
        action_space=PENDULUM_ACTIONS,
        module_config={"hidden_sizes": (32,)},
        normalize_actions=True,
    )
    return _random_weights(policy, seed=9, scale=0.2)


def _q_module() -> Policy:
    policy = Policy.build(
        QModule,
        observation_space=CARTPOLE,
        action_space=gym.spaces.Discrete(3, start=2),
        module_config={"epsilon": 0.1},
    )
    return _random_weights(policy, seed=10)


NUMPY_POLICIES = {
    "mlp-discrete-filter": (_numpy_cartpole, _cartpole_obs),
    "mlp-box": (_numpy_pendulum, _pendulum_obs),
    "mlp-box-normalize-actions": (_numpy_pendulum_normalized, _pendulum_obs),
    "q-discrete-start": (_q_module, _cartpole_obs),
}


class TestNpz:
    @pytest.mark.parametrize("make", NUMPY_POLICIES.values(), ids=NUMPY_POLICIES.keys())
    def test_docs_numpy_evaluator_gives_compute_actions(self, make: Any, tmp_path: Path) -> None:
        make_policy, make_obs = make
        policy = make_policy()
        npz, spec = export_npz(policy, tmp_path / "policy.npz")
        namespace: dict[str, Any] = {}
        exec(_docs_snippet(), namespace)
        obs = make_obs(seed=11)
        with np.load(npz) as weights:
            got = namespace["act"](json.loads(spec.read_text()), weights, obs)
        want = policy.compute_actions(obs)
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)

    def test_spec_describes_the_weights_in_plain_json(self, tmp_path: Path) -> None:
        policy = _numpy_pendulum()
        files = export_npz(policy, tmp_path / "policy.npz")
        assert files == [tmp_path / "policy.npz", tmp_path / "policy.json"]
        spec = json.loads(files[1].read_text())
        assert spec["format"] == NPZ_FORMAT
        assert (spec["head"], spec["num_layers"], spec["layer_sizes"]) == ("pi", 2, [3, 32, 1])
        assert (spec["activation"], spec["output"], spec["filter"]) == ("tanh", "mean", None)
        assert spec["action_space"] == {"type": "Box", "shape": [1], "dtype": "float32", "low": [-2.0], "high": [2.0]}
        with np.load(files[0], allow_pickle=False) as weights:
            assert sorted(weights.files) == sorted(policy.module.get_state())

    def test_multi_agent_policy_is_a_folder_of_one_pair_per_module(self, tmp_path: Path) -> None:
        policy = MultiAgentPolicy(
            {"runner": _numpy_cartpole(), "chaser": _q_module()}, {"a0": "runner", "a1": "runner", "b0": "chaser"}
        )
        files = export_npz(policy, tmp_path / "out")
        names = ["runner.npz", "runner.json", "chaser.npz", "chaser.json", MAPPING_FILE]
        assert files == [tmp_path / "out" / name for name in names]
        mapping = json.loads((tmp_path / "out" / MAPPING_FILE).read_text())
        assert mapping["mapping"] == [["a0", "runner"], ["a1", "runner"], ["b0", "chaser"]]
        assert mapping["files"] == {"runner": "runner.npz", "chaser": "chaser.npz"}


def _torch_policy(**kwargs: Any) -> Policy:
    spaces = {"observation_space": CARTPOLE, "action_space": gym.spaces.Discrete(2)} | kwargs
    return Policy.build(TorchMLPModule, module_config={"hidden_sizes": (8,)}, **spaces)


def _lstm_policy() -> Policy:
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    module_config = {"lstm_cell_size": 4, "encoder_hidden_sizes": (4,), "head_hidden_sizes": (4,)}
    return Policy.build(
        TorchLSTMModule, observation_space=CARTPOLE, action_space=gym.spaces.Discrete(2), module_config=module_config
    )


REFUSED = {
    "numpy-as-onnx": (
        export_onnx,
        lambda: _numpy_pendulum(),
        r"^policy 'module' must be a torch module to export as ONNX \(got the numpy MLPModule: export it as npz\)$",
    ),
    "torch-as-npz": (
        export_npz,
        lambda: _torch_policy(),
        r"^policy 'module' must be an MLPModule or QModule to export as npz \(got TorchMLPModule: export it as ONNX\)$",
    ),
    "recurrent": (export_onnx, _lstm_policy, r"^policy 'module' must be stateless to export \(got TorchLSTMModule,"),
    "frame-stack": (
        export_onnx,
        lambda: _torch_policy(env_to_module_connectors=(FrameStackingEnvToModule(num_frames=2),)),
        r"^policy 'env_to_module_connectors' may hold only a MeanStdFilter to export \(got FrameStackingEnvToModule;",
    ),
    "prev-actions": (
        export_npz,
        lambda: Policy.build(
            MLPModule,
            observation_space=CARTPOLE,
            action_space=gym.spaces.Discrete(2),
            env_to_module_connectors=(PrevActionsPrevRewardsEnvToModule(),),
        ),
        r"^policy 'env_to_module_connectors' may hold only a MeanStdFilter to export \(got PrevActionsPrevRewards",
    ),
    "dict-obs": (
        export_onnx,
        lambda: _torch_policy(observation_space=gym.spaces.Dict({"a": CARTPOLE, "b": PENDULUM})),
        r"^policy 'observation_space' must be a Box to export \(got Dict\(",
    ),
    "tuple-obs": (
        export_npz,
        lambda: Policy.build(
            MLPModule, observation_space=gym.spaces.Tuple((CARTPOLE, PENDULUM)), action_space=gym.spaces.Discrete(2)
        ),
        r"^policy 'observation_space' must be a Box to export \(got Tuple\(",
    ),
}


class TestRefusals:
    @pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
    def test_refused_in_one_line_before_anything_is_written(self, case: Any, tmp_path: Path) -> None:
        export, make_policy, message = case
        policy = make_policy()
        with pytest.raises(ConfigError, match=message):
            export(policy, tmp_path / "out" / "policy.onnx")
        assert not (tmp_path / "out").exists()

    def test_module_id_that_cannot_name_a_file(self, tmp_path: Path) -> None:
        policy = MultiAgentPolicy({"a/b": _numpy_pendulum()}, {"agent": "a/b"})
        with pytest.raises(ConfigError, match=r"^module id 'a/b' cannot name an exported file: letters, digits"):
            export_npz(policy, tmp_path / "out")
        assert not (tmp_path / "out").exists()


class TestCommand:
    def test_exports_a_run_directory_into_its_export_folder(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run = tmp_path / "run"
        _numpy_pendulum().save(run / "policy")
        main(["export", str(run)])  # exit status 0: main returns
        assert capsys.readouterr().out.splitlines() == [
            f"exported the MLPModule policy of {run} as npz:",
            f"  {run / 'export' / 'policy.npz'}",
            f"  {run / 'export' / 'policy.json'}",
        ]
        assert default_out(run) == default_out(run / "policy") == run / "export"

    def test_format_the_module_cannot_take_exits_2_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _numpy_pendulum().save(tmp_path / "policy")
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(tmp_path / "policy"), "--format", "onnx"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == (
            "ray-sampler export: error: --format onnx: policy 'module' must be a torch module to export as ONNX "
            "(got the numpy MLPModule: export it as npz)\n"
        )
        assert not (tmp_path / "export").exists()

    def test_no_such_path_exits_2_with_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(tmp_path / "nowhere")])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == (
            f"ray-sampler export: error: CHECKPOINT {tmp_path / 'nowhere'} does not exist (a run directory, "
            "checkpoint or policy)\n"
        )

    def test_a_folder_without_a_policy_exits_2_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(tmp_path)])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.startswith(f"ray-sampler export: error: no policy at {tmp_path}: ")

    def test_out_may_name_the_file_of_a_single_agent_policy(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _numpy_pendulum().save(tmp_path / "policy")
        main(["export", str(tmp_path / "policy"), "--format", "npz", "--out", str(tmp_path / "mine.npz")])
        assert (tmp_path / "mine.npz").is_file()
        assert (tmp_path / "mine.json").is_file()
        assert capsys.readouterr().out.splitlines()[1:] == [f"  {tmp_path / 'mine.npz'}", f"  {tmp_path / 'mine.json'}"]
