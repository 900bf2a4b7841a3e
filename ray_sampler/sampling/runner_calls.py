"""RunnerCalls: what every single-agent runner answers the group the same way (its chunks as one
columnar object, or by reference, or sent to a replay actor), and its pipelines' state."""

from __future__ import annotations

import dataclasses
from typing import Any

from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_columnar import unpack_columnar
from ray_sampler.sampling.engines import Collected
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.replay_outbox import ReplayOutbox
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_tally import RunnerTally

__all__ = ["RunnerCalls", "pipeline_state", "set_pipeline_state"]


def pipeline_state(module: Any, env_to_module: Any, module_to_env: Any) -> dict[str, Any]:
    """Module weights and connector states (the keys ``get_state`` gives)."""
    return {
        "module": module.get_state(),
        "env_to_module": env_to_module.get_state(),
        "module_to_env": module_to_env.get_state(),
    }


def set_pipeline_state(state: dict[str, Any], module: Any, env_to_module: Any, module_to_env: Any) -> None:
    """Loads whichever of ``pipeline_state``'s keys ``state`` holds."""
    if "module" in state:
        module.set_state(state["module"])
    if "env_to_module" in state:
        env_to_module.set_state(state["env_to_module"])
    if "module_to_env" in state:
        module_to_env.set_state(state["module_to_env"])


class RunnerCalls:
    """``collect`` and ``collect_to`` over a runner's ``_collect`` (its chunks for one request)."""

    worker_index: int
    metrics: RunnerMetrics
    _tally: RunnerTally
    _outbox: ReplayOutbox

    def _collect(self, request: SampleRequest) -> Collected:
        raise NotImplementedError

    def _to_columnar(self, episodes: list[Any]) -> Any:
        """The transfer form of a call's chunks (a multi-agent runner's is ``MultiAgentColumnar``)."""
        return episodes_to_columnar(episodes)

    def collect(self, request: SampleRequest) -> tuple[ColumnarEpisodes | None, RunnerMetrics]:
        """``sample_columnar()`` for a request (what ``EnvRunnerGroup`` sends)."""
        result = self._collect(request)
        if isinstance(result, list):
            result = self._to_columnar(result) if result else None
        if request.chunks_by_ref and result is not None:  # the driver only passes the reference on
            import ray

            running = dataclasses.replace(self.metrics, running_episode_ids=self._tally.running_episode_ids)
            return ray.put(result), running  # type: ignore[return-value]
        return result, self.metrics

    def collect_to(self, replay: Any, request: SampleRequest) -> RunnerMetrics:
        """``sample_to()`` for a request (what ``EnvRunnerGroup`` sends): the chunks go to ``replay``,
        first those a dead replay did not take; the metrics carry the replay's acknowledgement."""
        col, metrics = self.collect(request)
        if col is not None:
            self._outbox.hold(col)
        ack = self._outbox.send(replay)
        return dataclasses.replace(
            metrics,
            replay=ack,
            num_env_steps_held_for_replay=self._outbox.num_env_steps,
            running_episode_ids=self._tally.running_episode_ids,
        )

    def _take_outbox(self) -> list[SingleAgentEpisode]:
        """The chunks held for a dead replay actor, in order (for ``drain``)."""
        return [ep for col in self._outbox.take() for ep in unpack_columnar(col)]

    def get_metrics(self) -> RunnerMetrics:
        """Metrics of the last ``sample()`` call."""
        return self.metrics

    def ping(self) -> int:
        """Cheap liveness check; returns the worker index."""
        return self.worker_index
