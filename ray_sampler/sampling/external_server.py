"""ExternalServer: the TCP side of an external env runner (asyncio, in a thread of its own).

It accepts connections, authenticates each by its first message (``hello``: protocol version and
token, read with the small pre-authentication size limit and ``handshake_timeout_s``), then reads
one message at a time and writes one answer per message, in order. What a message means is the
``service``'s (``external_service.py``); the server only frames, limits and counts. A message over
``max_message_bytes``, a body that is no JSON object, a client silent past ``client_timeout_s`` or
one that does not read its answers closes that connection alone, with a log line and a count in
``ServerStats``; the other connections never wait on it (one event loop, no blocking call in it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hmac
import itertools
import logging
import ssl
import threading
from typing import Any, Protocol

from ray_sampler.client.protocol import (
    HEADER,
    MAX_HANDSHAKE_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    frame,
    parse,
)
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.external_config import ExternalConfig

__all__ = ["ExternalServer", "ServerStats", "Service"]

logger = logging.getLogger(__name__)


class Service(Protocol):
    """What the server asks of the runner behind it."""

    def welcome(self, connection: str, hello: dict[str, Any]) -> dict[str, Any]:
        """The answer to an authenticated ``hello`` (ProtocolError refuses the client)."""

    async def handle(self, connection: str, message: dict[str, Any]) -> dict[str, Any]:
        """The answer to one message (ProtocolError or another RaySamplerError: an error answer)."""

    def closed(self, connection: str) -> None:
        """The connection is gone: its running episodes end unfinished."""


@dataclasses.dataclass
class ServerStats:
    """What the server saw since it started (``snapshot()`` for metrics)."""

    num_clients_connected: int = 0
    """Connections authenticated and open now."""
    num_clients_total: int = 0
    """Connections authenticated since the start."""
    num_clients_dropped: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Connections the server closed, by reason (``auth``, ``version``, ``oversized``, ``malformed``,
    ``timeout``, ``slow_reader``, ``full``)."""
    num_messages_rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Messages answered with an error (the connection stays open), by the message's type."""

    def snapshot(self) -> dict[str, Any]:
        return {
            "num_clients_connected": self.num_clients_connected,
            "num_clients_total": self.num_clients_total,
            "num_clients_dropped": dict(self.num_clients_dropped),
            "num_messages_rejected": dict(self.num_messages_rejected),
        }


class _Drop(Exception):
    """Closes one connection; ``reason`` is its count's key, the message goes to the client."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ExternalServer:
    """Listens on ``(config.host, port)`` for ``service``'s clients once ``start`` returns."""

    def __init__(self, config: ExternalConfig, *, port: int, service: Service, name: str = "external") -> None:
        self.config = config
        self.service = service
        self.name = name
        self.stats = ServerStats()
        self._requested_port = port
        self.port: int | None = None
        """The port listened on (known once ``start`` returned; the one asked for, or a free one)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)
        self._num_handshakes = 0
        self._writers: set[asyncio.StreamWriter] = set()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> ExternalServer:
        """Binds and serves in a daemon thread; ConfigError (one line) when the address cannot be bound."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(
                        self._serve,
                        self.config.host,
                        self._requested_port,
                        ssl=self._ssl_context(),
                        limit=2**16,
                        ssl_handshake_timeout=self.config.handshake_timeout_s if self.config.ssl_certfile else None,
                    )
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except (OSError, ssl.SSLError) as e:
                failure.append(e)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"{self.name}-server", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            e = failure[0]
            raise ConfigError(
                f"'external.port': cannot listen on {self.config.host}:{self._requested_port} ({type(e).__name__}: {e})"
            )
        return self

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self.config.ssl_certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.config.ssl_certfile, self.config.ssl_keyfile)
        return context

    def stop(self) -> None:
        """Closes every connection and the listening socket; returns once the thread ended."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        thread.join(timeout=10)

    def call_soon(self, callback: Any) -> None:
        """Runs ``callback`` in the server's thread (from any thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(callback)

    # ---------------------------------------------------------------- one connection
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = f"c{next(self._ids)}"
        peer = writer.get_extra_info("peername")
        authenticated = False
        self._writers.add(writer)
        self._num_handshakes += 1
        in_handshake = True
        try:
            # Connections not yet authenticated count too: a flood of them cannot hold every socket.
            if self.stats.num_clients_connected + self._num_handshakes > self.config.max_clients:
                raise _Drop("full", f"the server serves {self.config.max_clients} clients at most; try later")
            hello = await self._read(reader, MAX_HANDSHAKE_BYTES, self.config.handshake_timeout_s)
            answer = self._authenticate(connection, hello)
            self._num_handshakes -= 1
            in_handshake = False
            authenticated = True
            self.stats.num_clients_connected += 1
            self.stats.num_clients_total += 1
            await self._write(writer, answer)
            while True:
                message = await self._read(reader, self.config.max_message_bytes, self.config.client_timeout_s)
                if message is None:
                    return  # the client closed between messages
                await self._write(writer, await self._answer(connection, message))
        except _Drop as drop:
            self.stats.num_clients_dropped[drop.reason] += 1
            logger.warning("%s: closed %s (%s): %s", self.name, connection, peer, drop)
            with contextlib.suppress(Exception):
                writer.write(frame({"type": "error", "error": str(drop), "fatal": True}))
                await asyncio.wait_for(writer.drain(), 1.0)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError) as e:
            if authenticated:
                logger.info("%s: %s (%s) went away: %s", self.name, connection, peer, type(e).__name__)
        except Exception as e:  # a client's message the checks above did not foresee: its connection only
            self.stats.num_clients_dropped["malformed"] += 1
            logger.warning("%s: closed %s (%s): %s: %s", self.name, connection, peer, type(e).__name__, e)
        finally:
            if in_handshake:
                self._num_handshakes -= 1
            self._writers.discard(writer)
            if authenticated:
                self.stats.num_clients_connected -= 1
                self.service.closed(connection)
            writer.close()

    def _authenticate(self, connection: str, hello: dict[str, Any] | None) -> dict[str, Any]:
        if hello is None or hello.get("type") != "hello":
            raise _Drop("malformed", 'the first message must be a "hello"')
        if hello.get("protocol") != PROTOCOL_VERSION:
            raise _Drop(
                "version",
                f"this server speaks protocol {PROTOCOL_VERSION} (the client asked for {hello.get('protocol')!r})",
            )
        token = self.config.token
        given = hello.get("token")
        if token is not None and not (
            isinstance(given, str) and hmac.compare_digest(given.encode(errors="replace"), token.encode())
        ):
            raise _Drop("auth", "wrong or missing token")
        try:
            return self.service.welcome(connection, hello)
        except ProtocolError as e:
            raise _Drop("malformed", str(e)) from None

    async def _answer(self, connection: str, message: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.service.handle(connection, message)
        except (ProtocolError, ConfigError, ValueError, KeyError) as e:
            self.stats.num_messages_rejected[str(message.get("type"))] += 1
            return {"type": "error", "error": _one_line(e)}
        except Exception as e:  # the user's module or connector raised: the client hears it, the runner goes on
            self.stats.num_messages_rejected[str(message.get("type"))] += 1
            logger.exception("%s: answering %s's %r failed", self.name, connection, message.get("type"))
            return {"type": "error", "error": f"the server failed on this message ({type(e).__name__}: {_one_line(e)})"}

    async def _read(self, reader: asyncio.StreamReader, max_bytes: int, timeout_s: float) -> dict[str, Any] | None:
        """One message, or None when the client closed before its first byte."""
        try:
            async with asyncio.timeout(timeout_s):  # one timer a message (cheaper than wait_for's task per read)
                header = await reader.read(HEADER.size)
                if not header:
                    return None
                if len(header) < HEADER.size:
                    header += await reader.readexactly(HEADER.size - len(header))
                (size,) = HEADER.unpack(header)
                if size > max_bytes:
                    raise _Drop("oversized", f"message of {size} bytes is over the limit of {max_bytes}")
                body = await reader.readexactly(size)
        except TimeoutError:
            raise _Drop("timeout", f"nothing (or not a whole message) came for {timeout_s:g} s") from None
        try:
            return parse(body)
        except ProtocolError as e:
            raise _Drop("malformed", str(e)) from None

    async def _write(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        try:
            data = frame(message)
        except ValueError as e:  # NaN in an answer (a module gave one): JSON has no NaN
            data = frame({"type": "error", "error": f"the answer could not be written as JSON ({e})"})
        writer.write(data)
        if writer.transport.get_write_buffer_size() == 0:
            return  # all sent at once (the usual case): no wait, no timer
        try:
            async with asyncio.timeout(self.config.client_timeout_s):
                await writer.drain()
        except TimeoutError:
            raise _Drop("slow_reader", "the client did not read its answers") from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
