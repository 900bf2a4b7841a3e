"""The package layout's promises: light data imports, no private names across modules, public
names where users import them (the layer order itself is import-linter's, in pyproject.toml)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ray_sampler", "connectors", "replay", "learner")


def _library_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import ray_sampler.data",
        "from ray_sampler.data import SingleAgentEpisode",
        "from ray_sampler.data import LookbackBuffer",
        "from ray_sampler.data import ColumnarEpisodes, episodes_to_columnar, columnar_to_episodes",
        "from ray_sampler import SingleAgentEpisode, LookbackBuffer, ColumnarEpisodes",
        "import ray_sampler.modules",
        "from ray_sampler.policy import Policy, MultiAgentPolicy, load_policy",
    ],
)
def test_data_and_modules_load_neither_ray_nor_pyarrow(statement: str) -> None:
    loaded = _loaded_after(statement)
    assert "ray" not in loaded
    assert "pyarrow" not in loaded


def test_arrow_names_load_pyarrow_on_first_use() -> None:
    assert "pyarrow" in _loaded_after("from ray_sampler.data import columnar_to_arrow")


def _private_imports(path: Path) -> list[str]:
    """``from M import _name`` where M is another module of this project."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            found += [
                f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return found


def test_no_private_name_is_imported_from_another_module() -> None:
    found = [line for path in _library_files() for line in _private_imports(path)]
    assert found == []


def test_private_import_check_finds_a_private_import(tmp_path: Path) -> None:
    probe = ROOT / "ray_sampler" / "_layout_probe.py"
    probe.write_text("from ray_sampler.data.columnar import _offsets\n")
    try:
        expected = "ray_sampler/_layout_probe.py: from ray_sampler.data.columnar import _offsets"
        assert _private_imports(probe) == [expected]
    finally:
        probe.unlink()


def test_public_imports_users_write_keep_working() -> None:
    import ray_sampler
    from connectors import ConnectorPipelineV2, ConnectorV2, MeanStdFilter  # noqa: F401
    from learner import (  # noqa: F401
        DQNLearner,
        DQNTrainingConfig,
        Learner,
        LearnerGroup,
        PPOTrainingConfig,
        train_dqn,
        train_ppo,
    )
    from ray_sampler import (  # noqa: F401
        ColumnarEpisodes,
        EnvRunner,
        EnvRunnerConfig,
        EnvRunnerGroup,
        EnvRunnerGroupConfig,
        MLPModule,
        SingleAgentEpisode,
        register_env,
    )
    from replay import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer, ReplayActor  # noqa: F401

    assert sorted(ray_sampler.__all__) == sorted(dir(ray_sampler))
    for name in ray_sampler.__all__:
        assert getattr(ray_sampler, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ray_sampler.nope  # noqa: B018
