"""The socket server: socket.io on ASGI in the API's app (layer: realtime; imports socketio,
engine.runtime, engine.stream, store.keys, security.sessions, realtime.connection,
realtime.outbox).

Connect with an API key (`auth={"key": ...}` or `Authorization: Bearer`), or with the
console's session cookie plus its CSRF token (`auth={"csrf": ...}`: a page on another site
cannot know it, so it cannot ride the cookie): refused with a problem code when it is
missing, revoked, expired or past the socket caps. Both go through `Ator.access`. The
server puts the socket in `org:<org>` and `user:<user>`; a thread's or a workflow run's room
only through `join` after the ownership check. Every frame is the event `frame` with
`{v, seq, type, data}` (engine.stream).

Commands, each acknowledged with `{"ok": true, ...}` or `{"ok": false, "error": {"code",
"status", "detail"}}`, the key re-checked and the API's per-user rate limit counted first:
- `join {thread_id, after_seq}`: exactly the frames after `after_seq` from the database, then
  live (no gap, no duplicate); joining again restarts from the new cursor.
  `join {run_id, after_seq}`: the same for a workflow run's events (room `run:<id>`, the
  same replay code over the run's log, realtime.logs; step progress coalesced).
- `leave {thread_id}` or `leave {run_id}`; `send {thread_id, text, client_message_id}` (member);
  `stop {thread_id}` (member); `decide {approval_id, decision, arguments?, reason?}`
  (member: realtime/approvals.py).
Any other event name is answered `{"ok": false, "error": {"code": "unknown_command", …}}`.
`send` is checked by the runtime's one message rule, as `POST …/messages` is.

Token deltas are volatile: dropped for a socket whose transport lags. A socket whose outbox
(realtime.outbox) has not drained for `ATOR_SOCKET_SLOW_TIMEOUT` is disconnected. The org room gets
`turn.started` (with the thread's `parent_id` / `root_id`, so a subagent tree view knows a
new child) / `turn.ended` (busy/idle, with usage and cost, and the calls it `held` for a
decision) from the replica running the turn, and `approval.decided` from the replica where
a decision committed; with `ATOR_REDIS_URL` the socket.io Redis manager carries them (and
any room emit) to sockets on every replica, while a thread's frames are relayed by the
replica holding the socket from the coordinator's channels.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from http.cookies import CookieError, SimpleCookie
from typing import Any
from uuid import UUID

import socketio  # type: ignore[import-untyped]

from ator.engine.access import Access
from ator.engine.approvals import Approvals, action_view
from ator.engine.runtime import Ator
from ator.engine.wire import turn_frame
from ator.errors import (
    AtorError,
    CoordinationError,
    Forbidden,
    RateLimited,
    ValidationFailed,
)
from ator.obs.logging import get_logger
from ator.realtime import approvals
from ator.realtime.connection import Connection, SocketCounts, is_org_room, org_room
from ator.realtime.feed import Feeds
from ator.realtime.logs import RunLog, ThreadLog
from ator.realtime.managers import LocalManager, RedisManager
from ator.realtime.outbox import Outbox, Server
from ator.security.roles import check_role
from ator.security.sessions import csrf_valid, session_from_cookies
from ator.store.records import Event, Principal
from ator.store.scope import Scope

__all__ = ["SOCKETIO_CHANNEL", "SocketServer"]

SOCKETIO_CHANNEL = "socketio"  # the replicas' socket.io messages (a coordinator channel)

log = get_logger("ator.realtime")

Handler = Callable[[Connection, dict[str, Any]], Awaitable[dict[str, Any]]]


class Unauthenticated(AtorError):
    kind = "auth"
    code = "unauthenticated"
    status = 401


class UnknownCommand(AtorError):
    kind = "validation"
    code = "unknown_command"
    status = 404


class SocketServer:
    """The socket.io server of one replica. `asgi` is its ASGI app (path /socket.io/);
    `attach(ator)` once the runtime is open, `close()` before it closes."""

    def __init__(self, *, redis_url: str | None = None, prefix: str = "ator:") -> None:
        # Replicas' socket.io messages: the coordinator's channel `SOCKETIO_CHANNEL` (so
        # `<prefix>socketio` on Redis), published through the runtime's coordinator once
        # attached to a runtime on the same Redis and prefix.
        self._redis = (redis_url, prefix) if redis_url else None
        manager = (RedisManager(redis_url, channel=prefix + SOCKETIO_CHANNEL) if redis_url
                   else LocalManager())
        manager.deliver_in_background(is_org_room)
        # cors_allowed_origins=None: a browser's socket is accepted from this server's own
        # origin only (the console at /ui); clients that send no Origin are not browsers.
        self.sio = Server(async_mode="asgi", client_manager=manager,
                          cors_allowed_origins=None, logger=False, engineio_logger=False)
        self.asgi = socketio.ASGIApp(self.sio, socketio_path="socket.io")
        self._ator: Ator | None = None
        self._counts: SocketCounts | None = None
        self._conns: dict[str, Connection] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unwatch: Callable[[], None] | None = None
        self.feeds: Feeds | None = None
        self.run_feeds: Feeds | None = None
        self.sio.on("connect", self._connect)
        self.sio.on("disconnect", self._disconnect)
        commands: dict[str, Handler] = {"join": self._join, "leave": self._leave,
                                        "send": self._send, "stop": self._stop,
                                        "decide": self._decide}
        for name, handler in commands.items():
            self.sio.on(name, self._command(handler))
        self.sio.on("*", self._unknown)

    @property
    def connections(self) -> int:
        return len(self._conns)

    def attach(self, ator: Ator) -> None:
        """Serve with `ator`: socket caps from its settings, org pushes from its publisher,
        and (on Redis) the manager's listener started now rather than at the first socket."""
        self._ator = ator
        s = ator.settings
        self._counts = SocketCounts(per_user=s.max_sockets_per_user, per_org=s.max_sockets_per_org)
        unwatch = [ator.publisher.watch(self._on_events),
                   ator.service(Approvals).watch(self._on_decided)]

        def unwatch_all() -> None:
            for fn in unwatch:
                fn()

        self._unwatch = unwatch_all

        def disconnect(sid: str) -> None:
            self._spawn(self.sio.disconnect(sid, ignore_queue=True))

        self.feeds, self.run_feeds = (
            Feeds(self.sio, log(lambda: self.ator), outbox_bytes=s.socket_outbox_bytes,
                  slow_timeout=s.socket_slow_timeout, disconnect=disconnect)
            for log in (ThreadLog, RunLog))
        if isinstance(self.sio.manager, RedisManager) \
                and self._redis == (s.redis_url, s.redis_prefix):
            self.sio.manager.publish_with(partial(ator.coord.publish, SOCKETIO_CHANNEL))
        self._spawn(self._recheck_every(s.socket_recheck_interval))
        self._spawn(self._sweep_every(s.socket_slow_timeout))
        if not self.sio.manager_initialized:
            self.sio.manager_initialized = True
            self.sio.manager.initialize()

    async def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        for sid in list(self._conns):
            await self.sio.disconnect(sid, ignore_queue=True)
            await self._drop(sid)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        listener = getattr(self.sio.manager, "thread", None)
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        redis = getattr(self.sio.manager, "redis", None)
        if redis is not None:
            await redis.aclose()
        await self.sio.shutdown()

    # Connect and disconnect -------------------------------------------------------------

    @property
    def ator(self) -> Ator:
        if self._ator is None:
            raise CoordinationError("the socket gateway is not attached to a runtime")
        return self._ator

    async def _connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> None:
        try:
            key = _key_from(environ, auth)
            principal = await self._principal(key)
            assert self._counts is not None
            self._counts.take(principal)
        except AtorError as exc:
            raise socketio.exceptions.ConnectionRefusedError(exc.message, _problem(exc)) from exc
        assert key is not None
        conn = self._conns[sid] = Connection(sid, principal, key)
        for room in conn.rooms:
            await self.sio.enter_room(sid, room)

    async def _disconnect(self, sid: str, *args: Any) -> None:
        await self._drop(sid)

    async def _drop(self, sid: str) -> None:
        conn = self._conns.pop(sid, None)
        if conn is not None:
            for follow in list(conn.follows.values()):
                await follow.feeds.unfollow(follow)
            conn.follows.clear()
            assert self._counts is not None
            self._counts.give_back(conn.principal)

    async def _principal(self, key: str | None) -> Principal:
        if not key:
            raise Unauthenticated("an API key is required (auth={'key': ...})")
        principal = await self.ator.service(Access).authenticate(key)
        if principal is None:
            raise Unauthenticated("the API key or session is not valid, expired or was revoked")
        return principal

    async def recheck(self) -> int:
        """Disconnect every socket whose key was revoked since; returns how many."""
        revoked = {key for key in {c.key for c in self._conns.values()}
                   if await self.ator.service(Access).authenticate(key) is None}
        gone = [sid for sid, c in self._conns.items() if c.key in revoked]
        for sid in gone:
            await self.sio.disconnect(sid, ignore_queue=True)
        return len(gone)

    def stalled(self, timeout: float) -> list[str]:
        """The sockets whose outbox has not drained for `timeout` seconds."""
        now = time.monotonic()
        out = []
        for sid in self._conns:
            sock = self.sio.eio.sockets.get(self.sio.manager.eio_sid_from_sid(sid, "/"))
            if sock is not None and isinstance(sock.queue, Outbox) \
                    and sock.queue.stalled_for(now) > timeout:
                out.append(sid)
        return out

    async def _sweep_every(self, timeout: float) -> None:
        """Disconnect stalled sockets: a client that stopped reading holds what it was sent
        in its outbox, never in more (it resumes with after_seq when it comes back)."""
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            for sid in self.stalled(timeout):
                log.info("disconnecting a socket that has not drained for %.1fs", timeout)
                self._spawn(self.sio.disconnect(sid, ignore_queue=True))

    async def _recheck_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.recheck()
            except AtorError:
                log.warning("could not re-check socket keys", exc_info=True)

    # Commands ---------------------------------------------------------------------------

    def _command(self, handler: Handler) -> Callable[[str, Any], Awaitable[dict[str, Any]]]:
        async def run(sid: str, payload: Any = None) -> dict[str, Any]:
            conn = self._conns.get(sid)
            if conn is None:
                return {"ok": False, "error": _problem(Unauthenticated("not connected"))}
            try:
                if await self.ator.service(Access).authenticate(conn.key) is None:
                    self._spawn(self.sio.disconnect(sid, ignore_queue=True))
                    raise Unauthenticated("the API key was revoked")
                await self._count(conn.principal)
                if not isinstance(payload, dict):
                    raise ValidationFailed("a command takes an object", code="invalid_command")
                return {"ok": True, **await handler(conn, payload)}
            except AtorError as exc:
                return {"ok": False, "error": _problem(exc)}
        return run

    async def _unknown(self, event: str, sid: str, *payload: Any) -> dict[str, Any]:
        """Any other event name: an error ack (a client waiting for one is not left to its
        timeout)."""
        known = "join, leave, send, stop, decide"
        return {"ok": False, "error": _problem(UnknownCommand(
            f"no command {event[:100]!r}; the commands are {known}"))}

    async def _count(self, p: Principal) -> None:
        """Commands share the HTTP API's per-(org, user) rate limit (on the coordinator)."""
        limit = self.ator.settings.rate_limit_per_minute
        if limit > 0:
            window = 60.0
            if await self.ator.count_hit(f"rl:{p.org_id}:{p.user_id}", window) > limit:
                raise RateLimited(f"more than {limit} requests this minute",
                                  retry_after=window - (time.time() % window))

    async def _join(self, conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
        feeds, key, field = self._target(payload)
        after_seq = payload.get("after_seq", 0)
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or not (
                0 <= after_seq <= 2**62):
            raise ValidationFailed("after_seq must be a seq (an integer >= 0)",
                                   code="invalid_cursor")
        room = feeds.room(key)
        conn.check_room_limit(room, self.ator.settings.max_socket_rooms)
        old = conn.follows.pop(room, None)
        if old is not None:
            await feeds.unfollow(old)
        # NotFound for another org's thread or run, before anything is joined
        follow = await feeds.follow(conn.sid, conn.principal.scope, key, after_seq)
        if self._conns.get(conn.sid) is not conn:
            # The socket went while the follow was set up (its drop already ran): nothing
            # may stay registered for it, and socket.io has no room for it to enter.
            await feeds.unfollow(follow)
            raise Unauthenticated("not connected")
        conn.follows[room] = follow
        await self.sio.enter_room(conn.sid, room)
        return {field: str(key), "after_seq": after_seq, "room": room}

    async def _leave(self, conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
        feeds, key, field = self._target(payload)
        room = feeds.room(key)
        follow = conn.follows.pop(room, None)
        if follow is not None:
            await feeds.unfollow(follow)
        await self.sio.leave_room(conn.sid, room)
        return {field: str(key), "left": follow is not None}

    def _target(self, payload: dict[str, Any]) -> tuple[Feeds, UUID, str]:
        """The feeds and key a join or leave names: a `run_id`, else a `thread_id`."""
        if "run_id" in payload:
            assert self.run_feeds is not None, "attach() first"
            return self.run_feeds, _id(payload, "run_id"), "run_id"
        return self._feeds(), _thread_id(payload), "thread_id"

    async def _send(self, conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
        _require(conn.principal, "member")
        # Text and id are checked by the runtime's one message rule, as for HTTP.
        text: Any = payload.get("text")
        item, created = await self.ator.submit(conn.principal.scope, _thread_id(payload), text,
                                               client_message_id=payload.get("client_message_id"))
        return {"item": {"id": str(item.id), "thread_id": str(item.thread_id),
                         "client_message_id": item.client_message_id, "created": created}}

    async def _stop(self, conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
        _require(conn.principal, "member")
        stopped = await self.ator.stop(conn.principal.scope, _thread_id(payload))
        return {"stop": "requested" if stopped.running else "idle",
                "running": stopped.running, "descendants": stopped.descendants}

    async def _decide(self, conn: Connection, payload: dict[str, Any]) -> dict[str, Any]:
        return await approvals.decide(self.ator, conn.principal, payload)

    # Relays and pushes ------------------------------------------------------------------

    def _on_decided(self, scope: Scope, action: Any) -> None:
        frame = approvals.decided_frame(action_view(action))
        self._spawn(self.sio.emit("frame", frame, room=org_room(scope.org_id)))

    def _feeds(self) -> Feeds:
        if self.feeds is None:
            raise CoordinationError("the socket gateway is not attached to a runtime")
        return self.feeds

    def _on_events(self, scope: Scope, thread_id: UUID, events: Sequence[Event]) -> None:
        for event in events:
            frame = turn_frame(thread_id, event)
            if frame is not None:
                self._spawn(self.sio.emit("frame", frame, room=org_room(scope.org_id)))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a socket push failed", exc_info=task.exception())


def _key_from(environ: dict[str, Any], auth: Any) -> str | None:
    if isinstance(auth, dict) and isinstance(auth.get("key"), str):
        return str(auth["key"])
    header = str(environ.get("HTTP_AUTHORIZATION", ""))
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    cookies = SimpleCookie()
    try:
        cookies.load(str(environ.get("HTTP_COOKIE", "")))
    except CookieError:
        return None
    # The ASGI scope's scheme (engineio's wsgi.url_scheme believes any X-Forwarded-Proto).
    https = environ.get("asgi.scope", {}).get("scheme") in ("https", "wss")
    token = session_from_cookies({k: m.value for k, m in cookies.items()}, https=https)
    if token is None:
        return None
    given = auth.get("csrf") if isinstance(auth, dict) else None
    if not csrf_valid(token, given if isinstance(given, str) else None):
        raise Forbidden("a socket on the session cookie needs its CSRF token "
                        "(auth={'csrf': ...}); reload the console", code="csrf_failed")
    return token


def _thread_id(payload: dict[str, Any]) -> UUID:
    return _id(payload, "thread_id")


def _id(payload: dict[str, Any], field: str) -> UUID:
    try:
        return UUID(str(payload.get(field)))
    except ValueError as exc:
        what = field.removesuffix("_id")
        raise ValidationFailed(f"{field} must be a {what}'s id", code="invalid_command") \
            from exc


def _require(p: Principal, role: str) -> None:
    check_role(p.role, role)


def _problem(exc: AtorError) -> dict[str, Any]:
    return {"code": exc.code, "status": exc.status, "detail": exc.message}


class SocketRoute:
    """ASGI middleware sending /socket.io/ (HTTP long-polling and WebSocket) to the socket server
    and everything else to the app it wraps."""

    def __init__(self, app: Any, server: SocketServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith("/socket.io/"):
            await self.server.asgi(scope, receive, send)
            return
        await self.app(scope, receive, send)
