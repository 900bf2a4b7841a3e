"""PolicyClient: a simulator's side of an external env runner (RLlib's ``PolicyClient`` names).

``start_episode`` / ``get_action`` / ``log_action`` / ``log_returns`` / ``end_episode`` take and
give plain Python and numpy values. With ``inference="remote"`` the server acts: each
``get_action`` is one round trip (``log_returns`` answers are read with the next request, so they
cost no wait). With ``inference="local"`` the client pulls the module's weights, acts itself and
sends its finished steps in batches of ``batch_steps``; each batch is kept until the server
acknowledges it (the acknowledgement says when newer weights exist: the client pulls them then).

The first connection is tried for up to ``connect_timeout_s`` (the server may still be starting).
A client may bring its spaces (``observation_space``, ``action_space``: gymnasium Box or Discrete
spaces, or their protocol form): the server checks them, or, started without any, takes the first
client's (it answers ``retry``, and the client connects again once the runners listen).
When the connection breaks, the client reconnects with exponential backoff for up to
``reconnect_timeout_s`` and goes on: unacknowledged batches are sent again (the server stores
each once), and an episode the server lost with the connection goes on there as a new episode
from its next observation (the server counts the part it lost). An error the server answers
with raises ``ServerError``; one that closes the connection (a wrong token or protocol version)
is not retried.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time
import uuid
from typing import Any

import numpy as np

from .local_policy import LocalPolicy
from .protocol import PROTOCOL_VERSION, ServerError, encode_array, frame, read_message, space_to_wire, to_json_value

__all__ = ["PolicyClient"]


@dataclasses.dataclass
class _LocalEpisode:
    """A local-mode episode's steps not sent yet: ``len(observations) == len(actions)`` while an
    action is open (its reward still adding up), one more once an episode ended."""

    start: bool = True
    observations: list[Any] = dataclasses.field(default_factory=list)
    actions: list[Any] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    logp: list[float] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    ended: tuple[bool, bool] | None = None


class PolicyClient:
    """One connection to an external env runner at ``address`` (``"host:port"``)."""

    def __init__(
        self,
        address: str,
        *,
        inference: str = "remote",
        token: str | None = None,
        client_id: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 60.0,
        reconnect_timeout_s: float = 60.0,
        batch_steps: int = 200,
        seed: int | None = None,
        observation_space: Any = None,
        action_space: Any = None,
    ) -> None:
        if inference not in ("remote", "local"):
            raise ValueError(f"'inference' must be 'remote' or 'local' (got {inference!r})")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"'address' must be 'host:port' (got {address!r})")
        self.host, self.port = host.strip("[]"), int(port)
        self.inference = inference
        self.token = token
        self.client_id = client_id or uuid.uuid4().hex
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self.batch_steps = batch_steps
        self.num_reconnects = 0
        """Times the connection broke and was made again."""
        self._seed = seed
        self._spaces = {
            name: space_to_wire(space, name)
            for name, space in (("observation_space", observation_space), ("action_space", action_space))
            if space is not None
        }
        self._sock: socket.socket | None = None
        self._unanswered = 0
        self._open: set[str] = set()
        self._restarted: set[str] = set()
        self._counter = 0
        self._local: dict[str, _LocalEpisode] = {}
        self._unacked: list[tuple[int, list[dict[str, Any]]]] = []
        self._pending_chunks: list[dict[str, Any]] = []
        self._pending_steps = 0
        self._pending_batches: list[int] = []
        """The batch numbers of the local-mode answers still to come, in order (remote mode: none)."""
        self.num_batches_refused = 0
        """Local-mode batches the server answered with an error (never sent again)."""
        self._rewards: dict[str, tuple[Any, dict[str, Any]]] = {}
        """Per remote episode, the reward (or per-agent rewards) and infos logged since its last observation."""
        self._weights_stale = False
        self._next_batch = 0
        self.policy: LocalPolicy | None = None
        self.welcome: dict[str, Any] = {}
        self._connect_with_backoff(connect_timeout_s)

    # ---------------------------------------------------------------- the RLlib-named calls
    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """Starts an episode and returns its id (``episode_id``, or a new one)."""
        if episode_id is None:
            self._counter += 1
            episode_id = f"{self.client_id[:8]}-{self._counter}"
        if self.inference == "local":
            self._local[episode_id] = _LocalEpisode()
            return episode_id
        self._call({"type": "start_episode", "episode_id": episode_id, "training_enabled": training_enabled})
        self._open.add(episode_id)
        return episode_id

    def get_action(
        self,
        episode_id: str,
        observation: Any,
        *,
        terminateds: dict[Any, bool] | None = None,
        truncateds: dict[Any, bool] | None = None,
    ) -> Any:
        """The action to take for ``observation`` (an int for a Discrete space, else a numpy array); a
        multi-agent runner takes ``{agent: observation}`` for the agents to act and answers
        ``{agent: action}``; ``terminateds`` / ``truncateds`` (``{agent: True}``) end agents whose last
        observation this is (they get no action)."""
        if self.inference == "local":
            return self._act_locally(episode_id, observation)
        message = {"type": "get_action", "episode_id": episode_id, "observation": to_json_value(observation)}
        self._attach_reward(episode_id, message)
        for name, flags in (("terminateds", terminateds), ("truncateds", truncateds)):
            if flags:
                message[name] = {str(k): bool(v) for k, v in flags.items()}
        answer = self._call(message)
        self._restarted.discard(episode_id)
        action = answer["action"]
        if isinstance(action, dict):  # a multi-agent runner: {agent: action}
            return {k: np.asarray(a) if isinstance(a, list) else a for k, a in action.items()}
        return np.asarray(action) if isinstance(action, list) else action

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Records an action the simulator took itself for ``observation`` (remote inference)."""
        message = {
            "type": "log_action", "episode_id": episode_id, "observation": to_json_value(observation),
            "action": to_json_value(action),
        }  # fmt: skip
        self._attach_reward(episode_id, message)
        self._call(message)
        self._restarted.discard(episode_id)

    def log_returns(
        self, episode_id: str, reward: float | dict[Any, float], info: dict[str, Any] | None = None
    ) -> None:
        """Adds ``reward`` to the step under way (rewards add up until the next observation); a
        multi-agent runner takes ``{agent: reward}``."""
        if self.inference == "local":
            self._local[episode_id].reward += float(reward)  # type: ignore[arg-type]
            return
        if episode_id in self._restarted:
            return  # the server lost this step with the connection: it has no action to reward
        # Sent with the next observation (get_action, log_action or end_episode), which closes the
        # step: one message a step. The protocol's log_returns message does the same on its own.
        held = self._rewards.setdefault(episode_id, ({} if isinstance(reward, dict) else 0.0, {}))
        if isinstance(reward, dict):
            for k, v in reward.items():
                held[0][str(k)] = held[0].get(str(k), 0.0) + float(v)
            self._rewards[episode_id] = held
        else:
            self._rewards[episode_id] = (float(held[0]) + float(reward), held[1])
        if info:
            self._rewards[episode_id][1].update(to_json_value(info))

    def _attach_reward(self, episode_id: str, message: dict[str, Any]) -> None:
        """The rewards (and infos) logged since the episode's last observation go with this one."""
        held = self._rewards.pop(episode_id, None)
        if held is not None and episode_id not in self._restarted:
            message["reward"] = held[0]
            if held[1]:
                message["info"] = held[1]

    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        """Ends the episode with its last observation (``truncated``: cut short, not terminated)."""
        if self.inference == "local":
            ep = self._local.pop(episode_id)
            if ep.actions:
                ep.rewards.append(ep.reward)
                ep.observations.append(np.asarray(observation))
                ep.ended = (not truncated, truncated)
                self._queue(episode_id, ep)
            self._send_ready(force=False)
            return
        message = {
            "type": "end_episode", "episode_id": episode_id, "observation": to_json_value(observation),
            "truncated": truncated,
        }  # fmt: skip
        self._attach_reward(episode_id, message)
        self._call(message)
        self._open.discard(episode_id)
        self._restarted.discard(episode_id)

    def flush(self) -> None:
        """Local inference: sends every finished step now and waits until the server acknowledged
        every batch."""
        self._send_ready(force=True)
        self._call_answers()
        if self._weights_stale:
            self._pull_weights()

    def close(self) -> None:
        """Sends what is left (local inference) and closes the connection."""
        if self._sock is None:
            return
        try:
            if self.inference == "local":
                self.flush()
            else:
                self._read_unanswered()
        finally:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- local inference
    def _act_locally(self, episode_id: str, observation: Any) -> Any:
        ep = self._local[episode_id]
        obs = np.asarray(observation)
        if ep.actions:  # the open step ends in this observation
            ep.rewards.append(ep.reward)
            ep.reward = 0.0
        ep.observations.append(obs)
        assert self.policy is not None, "a local-mode client pulls weights when it connects"
        action, logp = self.policy.compute(obs)
        ep.actions.append(action)
        ep.logp.append(logp)
        if len(ep.rewards) >= self.batch_steps:
            self._queue(episode_id, ep)
        self._send_ready(force=False)
        return self.policy.for_env(action)

    def _queue(self, episode_id: str, ep: _LocalEpisode) -> None:
        """Moves the episode's finished steps into a chunk waiting to be sent."""
        k = len(ep.rewards)
        if not k:
            return
        chunk = {
            "episode_id": episode_id,
            "start": ep.start,
            "observations": _rows(ep.observations[: k + 1]),
            "actions": [a if type(a) is int else to_json_value(a) for a in ep.actions[:k]],
            "rewards": ep.rewards[:k],
            "action_logp": ep.logp[:k],
        }
        if ep.ended is not None:
            chunk["terminated"], chunk["truncated"] = ep.ended
        self._pending_chunks.append(chunk)
        self._pending_steps += k
        ep.start = False
        ep.observations, ep.actions, ep.rewards, ep.logp = ep.observations[k:], ep.actions[k:], [], ep.logp[k:]

    def _send_ready(self, *, force: bool) -> None:
        if force:
            for episode_id, ep in self._local.items():
                self._queue(episode_id, ep)
        pending = self._pending_chunks
        if not pending or (self._pending_steps < self.batch_steps and not force):
            return
        self._pending_chunks, self._pending_steps = [], 0
        batch = self._next_batch
        self._unacked.append((batch, pending))
        self._next_batch += 1
        # Not waited for: its acknowledgement is read before the next request (by then it has
        # usually come), so the simulator never waits on the server while it has steps to make. It
        # goes before the older answers are read, so an error answer to an older batch cannot keep
        # it from going.
        self._send_batch(batch, pending)
        if force:
            self._call_answers()
        if self._weights_stale:
            self._pull_weights()

    def _send_batch(self, batch: int, chunks: list[dict[str, Any]]) -> None:
        message = {"type": "chunks", "batch": batch, "chunks": chunks}
        try:
            assert self._sock is not None, "connected"
            self._sock.sendall(frame(message))
            self._unanswered += 1
            self._pending_batches.append(batch)
        except (OSError, ConnectionError):
            self._reconnect()  # sends every unacknowledged batch again, this one included
            return
        self._read_unanswered(leave=1)

    def _call_answers(self) -> None:
        """Reads every answer still to come (reconnecting if the connection broke meanwhile)."""
        try:
            self._read_unanswered()
        except (OSError, ConnectionError):
            self._reconnect()
            self._read_unanswered()

    def _pull_weights(self, *, connecting: bool = False) -> None:
        message = {"type": "get_weights"}
        answer = self._exchange(message) if connecting else self._call(message)
        self.policy = LocalPolicy(answer, self.welcome["action_space"], seed=self._seed)
        self._weights_stale = False

    # ---------------------------------------------------------------- the connection
    def _connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
        self._sock = sock
        self._unanswered, self._pending_batches = 0, []
        hello: dict[str, Any] = {
            "type": "hello", "protocol": PROTOCOL_VERSION, "token": self.token, "inference": self.inference,
            "client_id": self.client_id, **self._spaces,
        }  # fmt: skip
        self.welcome = self._exchange(hello)
        if self.welcome["type"] == "retry":  # the server took our spaces and starts its runners
            sock.close()
            self._sock = None
            raise ConnectionError(f"the server is starting ({self.welcome.get('reason', '')})")
        if self.inference == "local":
            last = int(self.welcome.get("last_batch", -1))
            self._unacked = [(b, c) for b, c in self._unacked if b > last]
            self._pull_weights(connecting=True)

    def _connect_with_backoff(self, timeout_s: float) -> None:
        """Connects, trying again with exponential backoff (0.05 s doubling to 2 s) for up to
        ``timeout_s``: a server may be starting, or restarting after a failure."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            try:
                if self._sock is not None:
                    self._sock.close()
                self._sock = None
                self._connect()
                return
            except (OSError, ConnectionError) as e:
                if isinstance(e, ssl.SSLCertVerificationError):
                    raise  # a certificate the client does not trust: trying again will not help
                if time.monotonic() + delay > deadline:
                    raise ConnectionError(
                        f"could not connect to {self.host}:{self.port} within {timeout_s:g} s ({e})"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _reconnect(self) -> None:
        self._connect_with_backoff(self.reconnect_timeout_s)
        self.num_reconnects += 1
        # The server dropped this connection's episodes: they go on as new ones from their next observation.
        self._restarted |= self._open
        for episode_id in self._open:
            self._rewards.pop(episode_id, None)
        for episode_id in sorted(self._open):
            self._exchange({"type": "start_episode", "episode_id": episode_id})
        # Local inference: the server no longer holds this client's running episodes. What is sent
        # again (and what is still to send) begins each of them anew: every chunk holds the
        # observation its first action was taken on, so it can start an episode.
        started: set[str] = set()
        for _, chunks in self._unacked:
            for chunk in [*chunks]:
                if chunk["episode_id"] not in started:
                    chunk["start"] = True
                    started.add(chunk["episode_id"])
        for chunk in self._pending_chunks:
            if chunk["episode_id"] not in started:
                chunk["start"] = True
                started.add(chunk["episode_id"])
        for episode_id, ep in self._local.items():
            if episode_id not in started:
                ep.start = True
        self._pending_batches = []
        for batch, chunks in self._unacked:  # sent again, in order; their answers come as usual
            assert self._sock is not None, "connected"
            self._sock.sendall(frame({"type": "chunks", "batch": batch, "chunks": chunks}))
            self._unanswered += 1
            self._pending_batches.append(batch)

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        sock = self._sock
        assert sock is not None, "connected"
        sock.sendall(frame(message))
        return self._answer(read_message(sock))

    def _answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer["type"] == "error":
            raise ServerError(answer["error"])
        return answer

    def _read_unanswered(self, *, leave: int = 0) -> None:
        """Reads the answers still to come but the last ``leave``. An error answer to a batch takes
        that batch out of the ones to send again, counted in ``num_batches_refused``, then raises."""
        sock = self._sock
        assert sock is not None, "connected"
        while self._unanswered > leave:
            message = read_message(sock)
            self._unanswered -= 1  # before an error answer raises: the count stays in step
            batch = self._pending_batches.pop(0) if self._pending_batches else None
            if message["type"] == "error" and batch is not None:
                self._unacked = [(b, c) for b, c in self._unacked if b != batch]
                self.num_batches_refused += 1
            answer = self._answer(message)
            if answer["type"] == "ack":  # a local-mode batch is stored: it is never sent again
                self._unacked = [(b, c) for b, c in self._unacked if b != answer["batch"]]
                if self.policy is None or answer["weights_version"] > self.policy.version:
                    self._weights_stale = True

    def _call(self, message: dict[str, Any], *, wait: bool = True) -> dict[str, Any]:
        for attempt in range(2):
            try:
                if self._sock is None:
                    raise ConnectionError("not connected")
                self._read_unanswered()
                if not wait:
                    self._sock.sendall(frame(message))
                    self._unanswered += 1
                    return {}
                return self._exchange(message)
            except (OSError, ConnectionError) as e:
                if attempt or isinstance(e, ssl.SSLCertVerificationError):
                    raise
                self._reconnect()
                if message.get("episode_id") in self._restarted:  # its step went with the connection
                    message.pop("reward", None)
                    message.pop("info", None)
                if message["type"] == "log_returns":
                    return {}  # its step went with the connection
                if message["type"] == "chunks":
                    return {}  # the reconnect sent every unacknowledged batch again, this one too
        raise AssertionError("unreachable")


def _rows(observations: list[Any]) -> Any:
    """A chunk's observations: one array object when they are float arrays of one shape (decoded
    at once by the server), else a list of plain values."""
    first = observations[0]
    if isinstance(first, np.ndarray) and first.dtype.kind == "f" and all(o.shape == first.shape for o in observations):
        return encode_array(np.stack(observations))
    return [to_json_value(o) for o in observations]
