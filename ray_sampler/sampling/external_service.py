"""ExternalService: what each message of the external-simulator protocol does in a runner.

Per connection a session: its inference mode (``remote``: the server acts; ``local``: the client
acts with weights it pulls and sends chunks), its client id and the episodes it opened. Remote
mode records an episode step by step: an observation (``get_action`` / ``log_action``) closes the
step the previous action opened, with the rewards ``log_returns`` added meanwhile, and
``end_episode`` closes the last one. The ``get_action`` requests that arrive together are answered
by one batched forward pass. Local mode sends whole steps in ``chunks`` batches; a batch is stored
whole or not at all, then acknowledged with the weights version, and a batch number a client
already had acknowledged is acknowledged again without being stored twice (a client resends what
it had no answer for after reconnecting). The message reference is docs/external.md.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.client.protocol import PROTOCOL_VERSION, ProtocolError, decode_array, encode_array
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.external_episodes import ExternalEpisodes
from ray_sampler.sampling.external_policy import ServedPolicy
from ray_sampler.sampling.external_values import from_wire, same_space, space_message, to_wire

__all__ = ["ExternalService", "Session", "local_module_form"]

_ROOM_WAIT_S = 0.01
_MAX_KNOWN_CLIENTS = 100_000


def local_module_form(module: Any, observation_space: gym.Space, user_pieces: tuple[Any, ...]) -> dict[str, Any] | None:
    """How a client rebuilds the module to act locally (None: it cannot, with the reason in a
    ProtocolError at ``hello``): the built-in MLP on a flat Box observation, no user connector."""
    from ray_sampler.modules import MLPModule

    if type(module) is not MLPModule or user_pieces or module.action_mask_slice is not None:
        return None
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape or ()) == 1):
        return None
    return {
        "kind": "mlp",
        "activation": "tanh",
        "hidden_sizes": list(module.hidden_sizes),
        "gaussian": module.is_gaussian,
    }


@dataclasses.dataclass
class Session:
    inference: str
    client_id: str
    open: set[str] = dataclasses.field(default_factory=set)
    """Handles of the episodes this connection started and did not end."""
    untrained: dict[str, SingleAgentEpisode] = dataclasses.field(default_factory=dict)
    """Episodes started with ``training_enabled`` false: acted in, never shipped."""
    is_live: bool = True
    """False once a newer connection of the same client id took over (its episodes were dropped)."""


class ExternalService:
    """The protocol's semantics over a runner's episodes and policy (see the module docstring)."""

    def __init__(
        self,
        *,
        episodes: ExternalEpisodes,
        policy: ServedPolicy,
        observation_space: gym.Space,
        action_space: gym.Space,
        max_held_env_steps: int,
        local_form: dict[str, Any] | None,
        local_refusal: str,
    ) -> None:
        self.episodes = episodes
        self.policy = policy
        self.observation_space = observation_space
        self.action_space = action_space
        self.max_held_env_steps = max_held_env_steps
        self.local_form = local_form
        self._local_refusal = local_refusal
        self._spaces = {
            "observation_space": space_message(observation_space, "observation_space"),
            "action_space": space_message(action_space, "action_space"),
        }
        self.weights_version = 0
        self._sessions: dict[str, Session] = {}
        self._last_batch: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._pending: list[tuple[str, bool, asyncio.Future[Any]]] = []
        self._counter = 0
        self.num_chunk_steps_dropped = 0
        """Steps of local-mode chunks that continued an episode this runner does not hold (it restarted,
        or the client's connection dropped it), refused and counted."""

    # ---------------------------------------------------------------- sessions
    def welcome(self, connection: str, hello: dict[str, Any]) -> dict[str, Any]:
        inference = hello.get("inference", "remote")
        if inference not in ("remote", "local"):
            raise ProtocolError(f"'inference' must be 'remote' or 'local' (got {inference!r})")
        if inference == "local" and self.local_form is None:
            raise ProtocolError(f"'inference': 'local' is not possible here: {self._local_refusal}")
        for name, ours in self._spaces.items():
            if name in hello and not same_space(ours, hello[name]):
                raise ProtocolError(f"the client's {name} is not the server's ({ours['spec']})")
        client_id = hello.get("client_id")
        if client_id is None:
            self._counter += 1
            client_id = f"anonymous-{connection}-{self._counter}"
        if not isinstance(client_id, str) or not 1 <= len(client_id) <= 128:
            raise ProtocolError("'client_id' must be a string of 1 to 128 characters or absent")
        for old_connection, old in list(self._sessions.items()):
            if old.client_id == client_id:  # a client back before its old connection was seen closed
                self.closed(old_connection)
        self._sessions[connection] = Session(inference, client_id)
        return {
            "type": "welcome",
            "protocol": PROTOCOL_VERSION,
            "client_id": client_id,
            "weights_version": self.weights_version,
            "last_batch": self._last_batch.get(client_id, -1),
            **self._spaces,
        }

    def closed(self, connection: str) -> None:
        session = self._sessions.pop(connection, None)
        if session is not None:
            session.is_live = False
            self.episodes.drop([self._key(session, h) for h in session.open])

    def _key(self, session: Session, handle: str) -> str:
        return f"{session.client_id}/{handle}"

    # ---------------------------------------------------------------- messages
    async def handle(self, connection: str, message: dict[str, Any]) -> dict[str, Any]:
        session = self._sessions[connection]
        kind = message["type"]
        if kind not in _FIELDS or kind == "hello":
            raise ProtocolError(f"unknown message type {kind!r} (allowed: {', '.join(sorted(_FIELDS))})")
        handler = getattr(self, f"_{kind}")
        fields, modes = _FIELDS[kind], _MODES[kind]
        unknown = set(message) - fields - {"type"}
        if unknown:
            raise ProtocolError(f"{kind!r} has unknown fields {sorted(unknown)} (allowed: {sorted(fields)})")
        if session.inference not in modes:
            raise ProtocolError(f"{kind!r} is not for a client with {session.inference!r} inference")
        return await handler(session, message)

    async def _start_episode(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = message.get("episode_id")
        if handle is None:
            self._counter += 1
            handle = f"e{self._counter}"
        if not isinstance(handle, str) or not 1 <= len(handle) <= 128:
            raise ProtocolError("'episode_id' must be a string of 1 to 128 characters or absent")
        if handle in session.open or handle in session.untrained:
            raise ProtocolError(f"episode {handle!r} is already running")
        training = message.get("training_enabled", True)
        if not isinstance(training, bool):
            raise ProtocolError(f"'training_enabled' must be true or false (got {training!r})")
        if training:
            session.open.add(handle)
        else:
            session.untrained[handle] = SingleAgentEpisode(handle)
        return {"type": "episode_started", "episode_id": handle}

    def _handle(self, session: Session, message: dict[str, Any]) -> str:
        handle = message.get("episode_id")
        if handle not in session.open and handle not in session.untrained:
            raise ProtocolError(f"episode {handle!r} was never started (call start_episode first)")
        return str(handle)

    async def _get_action(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = self._handle(session, message)
        if "terminateds" in message or "truncateds" in message:
            raise ProtocolError(
                "'terminateds' and 'truncateds' are for a multi-agent runner's agents (end_episode here)"
            )
        obs = from_wire(self.observation_space, message.get("observation"), "observation")
        explore = message.get("explore", True)
        if not isinstance(explore, bool):
            raise ProtocolError(f"'explore' must be true or false (got {explore!r})")
        if handle in session.untrained:
            _, for_env, _ = self.policy.act([_probe(obs)], explore=explore)  # acts on the last observation
            return {"type": "action", "action": to_wire(for_env[0])}
        self._fold_reward(session, handle, message)
        await self._wait_for_room(session)
        key = self._key(session, handle)
        self._observe(key, obs)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._act_pending)
        self._pending.append((key, explore, future))
        return {"type": "action", "action": to_wire(await future)}

    def _observe(self, key: str, obs: Any) -> None:
        if self.episodes.is_running(key):
            self.episodes.step(key, obs)
        else:
            self.episodes.begin(key, obs)

    def _act_pending(self) -> None:
        """One forward pass for every ``get_action`` waiting (per ``explore`` value)."""
        pending, self._pending = self._pending, []
        for explore in (True, False):
            group = []
            for key, e, future in pending:
                if e is not explore or future.done():
                    continue
                if self.episodes.is_running(key):
                    group.append((key, future))
                else:  # its connection closed meanwhile
                    future.set_exception(ProtocolError("the episode ended before its action was computed"))
            if not group:
                continue
            try:
                episodes = [self.episodes.current(key) for key, _ in group]
                recorded, for_env, extras = self.policy.act(episodes, explore=explore)
            except Exception as e:  # the module or a connector raised: every waiting client hears it
                for _, future in group:
                    future.set_exception(e)
                continue
            for (key, future), action, env_action, extra in zip(group, recorded, for_env, extras):
                self.episodes.act(key, action, extra)
                future.set_result(env_action)

    async def _log_action(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = self._handle(session, message)
        obs = from_wire(self.observation_space, message.get("observation"), "observation")
        action = from_wire(self.action_space, message.get("action"), "action", check_contains=True)
        if handle in session.untrained:
            return {"type": "ok"}
        self._fold_reward(session, handle, message)
        await self._wait_for_room(session)
        key = self._key(session, handle)
        self._observe(key, obs)
        recorded, _, extras = self.policy.act([self.episodes.current(key)], explore=True, actions=[action])
        self.episodes.act(key, recorded[0], extras[0])
        return {"type": "ok"}

    async def _log_returns(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        self._take_reward(session, self._handle(session, message), message)
        return {"type": "ok"}

    def _fold_reward(self, session: Session, handle: str, message: dict[str, Any]) -> None:
        """The rewards a message brings beside its observation (as a ``log_returns`` before it)."""
        if "reward" in message or "info" in message:
            self._take_reward(session, handle, message)

    def _take_reward(self, session: Session, handle: str, message: dict[str, Any]) -> None:
        reward = message.get("reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
            raise ProtocolError(f"'reward' must be a finite number (got {reward!r})")
        info = message.get("info") or {}
        if not isinstance(info, dict):
            raise ProtocolError("'info' must be an object or absent")
        if handle in session.untrained:
            return
        key = self._key(session, handle)
        if not self.episodes.is_running(key) or self.episodes.open_step(key).action is None:
            raise ProtocolError(f"episode {handle!r} took no action yet to reward (call get_action first)")
        if not math.isfinite(self.episodes.open_step(key).reward + float(reward)):
            raise ProtocolError(f"'reward': the step's rewards add up to more than a float holds (got {reward!r} more)")
        self.episodes.log_reward(key, float(reward), info)

    async def _end_episode(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = self._handle(session, message)
        obs = from_wire(self.observation_space, message.get("observation"), "observation")
        truncated = message.get("truncated", False)
        if not isinstance(truncated, bool):
            raise ProtocolError(f"'truncated' must be true or false (got {truncated!r})")
        if session.untrained.pop(handle, None) is not None:
            return {"type": "ok"}
        self._fold_reward(session, handle, message)
        key = self._key(session, handle)
        session.open.discard(handle)
        if self.episodes.is_running(key):
            if self.episodes.open_step(key).action is None:
                self.episodes.discard(key)  # begun, but no action taken since: nothing to record
            else:
                self.episodes.step(key, obs, terminated=not truncated, truncated=truncated)
        return {"type": "ok"}

    async def _get_weights(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        state = self.policy.get_state()["module"]
        return {
            "type": "weights",
            "weights_version": self.weights_version,
            "module": self.local_form,
            "weights": {k: encode_array(np.asarray(v)) for k, v in state.items()},
        }

    async def _chunks(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        batch = message.get("batch")
        chunks = message.get("chunks")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise ProtocolError(f"'batch' must be an int >= 0 (got {batch!r})")
        if not isinstance(chunks, list):
            raise ProtocolError("'chunks' must be a list of chunk objects")
        last = self._last_batch.get(session.client_id, -1)
        if batch <= last:
            return {"type": "ack", "batch": batch, "weights_version": self.weights_version, "duplicate": True}
        try:
            parsed = [self._parse_chunk(c, i) for i, c in enumerate(chunks)]  # all checked before any is stored
            self._check_starts(session, parsed)
        except ProtocolError:
            # Its episodes would lack these steps: they end here (counted), and later chunks of them
            # are dropped and counted rather than joined on across the gap.
            handles = {c.get("episode_id") for c in chunks if isinstance(c, dict)}
            self.episodes.drop([self._key(session, h) for h in handles if isinstance(h, str)])
            session.open -= handles
            raise
        await self._wait_for_room(session)
        if batch <= self._last_batch.get(session.client_id, -1):  # stored by another connection meanwhile
            return {"type": "ack", "batch": batch, "weights_version": self.weights_version, "duplicate": True}
        dropped = sum(self._store_chunk(session, *chunk) for chunk in parsed)
        self._last_batch[session.client_id] = batch
        self._last_batch.move_to_end(session.client_id)
        while len(self._last_batch) > _MAX_KNOWN_CLIENTS:
            self._last_batch.popitem(last=False)
        return {"type": "ack", "batch": batch, "weights_version": self.weights_version, "num_steps_dropped": dropped}

    def _parse_chunk(self, chunk: Any, i: int) -> tuple[str, bool, list[Any], list[Any], list[float], Any, bool, bool]:
        what = f"chunks[{i}]"
        if not isinstance(chunk, dict):
            raise ProtocolError(f"{what!r} must be an object")
        allowed = {
            "episode_id",
            "start",
            "observations",
            "actions",
            "rewards",
            "action_logp",
            "terminated",
            "truncated",
        }
        if set(chunk) - allowed:
            raise ProtocolError(
                f"{what!r} has unknown fields {sorted(set(chunk) - allowed)} (allowed: {sorted(allowed)})"
            )
        handle, start = chunk.get("episode_id"), chunk.get("start", False)
        terminated, truncated = chunk.get("terminated", False), chunk.get("truncated", False)
        if not isinstance(handle, str) or not all(isinstance(f, bool) for f in (start, terminated, truncated)):
            raise ProtocolError(
                f"{what!r}: 'episode_id' must be a string and 'start', 'terminated', 'truncated' booleans"
            )
        obs, actions, rewards, logp = (chunk.get(k) for k in ("observations", "actions", "rewards", "action_logp"))
        if isinstance(obs, dict) and isinstance(self.observation_space, gym.spaces.Box):
            # One array object of n + 1 rows: decoded once (the Python client sends Box observations so).
            stacked = decode_array(obs, self.observation_space.dtype)
            if stacked.shape[1:] != self.observation_space.shape:
                raise ProtocolError(f"{what}.observations must have rows of shape {self.observation_space.shape}")
            obs = list(stacked)
        if not (
            isinstance(obs, list) and isinstance(actions, list) and isinstance(rewards, list) and isinstance(logp, list)
        ):
            raise ProtocolError(f"{what!r}: 'observations', 'actions', 'rewards' and 'action_logp' must be lists")
        n = len(actions)
        if not n or len(rewards) != n or len(logp) != n or len(obs) != n + 1:
            raise ProtocolError(
                f"{what!r} must hold n >= 1 actions, rewards and action_logp and n + 1 observations "
                f"(got {n}, {len(rewards)}, {len(logp)} and {len(obs)})"
            )
        observations = [
            o if isinstance(o, np.ndarray) else from_wire(self.observation_space, o, f"{what}.observations[{t}]")
            for t, o in enumerate(obs)
        ]
        if isinstance(self.observation_space, gym.spaces.Box) and not all(np.isfinite(o).all() for o in observations):
            raise ProtocolError(f"{what}.observations must hold finite numbers (got NaN or infinity)")
        acts = [
            from_wire(self.action_space, a, f"{what}.actions[{t}]", check_contains=True) for t, a in enumerate(actions)
        ]
        for name, values in (("rewards", rewards), ("action_logp", logp)):
            if not all(not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) for v in values):
                raise ProtocolError(f"{what!r}: {name!r} must hold finite numbers")
        return (
            handle,
            start,
            observations,
            acts,
            [float(r) for r in rewards],
            np.asarray(logp, np.float32),
            terminated,
            truncated,
        )

    def _check_starts(self, session: Session, parsed: list[Any]) -> None:
        """ProtocolError (before anything is stored) when a chunk starts an episode that runs then."""
        running: dict[str, bool] = {}
        for i, (handle, start, *_, terminated, truncated) in enumerate(parsed):
            key = self._key(session, handle)
            is_running = running.get(key, self.episodes.is_running(key))
            if start and is_running:
                raise ProtocolError(f"chunks[{i}] starts episode {handle!r}, which is running (end it first)")
            running[key] = (start or is_running) and not (terminated or truncated)

    def _store_chunk(
        self,
        session: Session,
        handle: str,
        start: bool,
        obs: list[Any],
        actions: list[Any],
        rewards: list[float],
        logp: np.ndarray,
        terminated: bool,
        truncated: bool,
    ) -> int:
        """Adds a chunk's steps (the server's module outputs for its observations beside the client's
        log-probabilities); returns the steps dropped (a continuation of an episode not held here)."""
        key = self._key(session, handle)
        if start:
            self.episodes.begin(key, obs[0])
            session.open.add(handle)
        elif not self.episodes.is_running(key):
            self.num_chunk_steps_dropped += len(actions)
            return len(actions)
        _, _, outputs = self.policy.act([_probe(o) for o in obs[:-1]], explore=True, actions=actions)
        last = len(actions) - 1
        for t, (action, reward, extra) in enumerate(zip(actions, rewards, outputs)):
            extra[Columns.ACTION_LOGP] = logp[t]
            self.episodes.act(key, action, extra)
            self.episodes.log_reward(key, reward)
            done = t == last
            self.episodes.step(key, obs[t + 1], terminated=terminated and done, truncated=truncated and done)
        if terminated or truncated:
            session.open.discard(handle)
        return 0

    async def _wait_for_room(self, session: Session) -> None:
        """Back-pressure: the answer waits while the runner holds ``max_held_env_steps`` that a call
        can take (in complete mode, finished episodes' steps only: a running one must go on to
        finish). ProtocolError when a newer connection of the client took over meanwhile."""
        while self.episodes.num_backlog_steps() >= self.max_held_env_steps:
            await asyncio.sleep(_ROOM_WAIT_S)
        if not session.is_live:
            raise ProtocolError("a newer connection of this client id took over")


def _probe(obs: Any) -> SingleAgentEpisode:
    """An episode holding only ``obs`` (what the pipelines read to act on it)."""
    ep = SingleAgentEpisode()
    ep.add_env_reset(obs)
    return ep


_FIELDS = {
    "start_episode": {"episode_id", "training_enabled"},
    "get_action": {"episode_id", "observation", "explore", "terminateds", "truncateds", "reward", "info"},
    "log_action": {"episode_id", "observation", "action", "reward", "info"},
    "log_returns": {"episode_id", "reward", "info"},
    "end_episode": {"episode_id", "observation", "truncated", "reward", "info"},
    "get_weights": set(),
    "chunks": {"batch", "chunks"},
}
_MODES = {
    "start_episode": {"remote", "local"},
    "get_action": {"remote"},
    "log_action": {"remote"},
    "log_returns": {"remote"},
    "end_episode": {"remote"},
    "get_weights": {"local"},
    "chunks": {"local"},
}
