"""The Comb client: one coroutine per request of docs/protocol.md."""

from __future__ import annotations

import dataclasses
import ssl
from datetime import datetime
from typing import Any, Awaitable, Callable, Iterable, Optional, Sequence, Union

from . import _nats, _wire
from .errors import (
    BadRequest,
    CombError,
    NoRespondersError,
    RequestTimeoutError,
    reply_error,
)
from .types import (
    Ack,
    AckResult,
    Config,
    CONFIG_FIELDS,
    DeadLetter,
    Delivery,
    Info,
    Message,
    PushResult,
    QueueSummary,
    RenewResult,
)

DEFAULT_PREFIX = "comb"
# How long a request waits for its reply, in seconds, on top of a pop's
# long-poll time.
DEFAULT_TIMEOUT = 10.0

# The largest pages of info and list (protocol.MaxInfoLimit, MaxListLimit):
# info() and list() read every page with them.
MAX_INFO_LIMIT = 10000
MAX_LIST_LIMIT = 10000

HEADER_PARTITION = "Comb-Partition"
HEADER_ID = "Comb-Id"
HEADER_DELAY_MS = "Comb-Delay-Ms"
HEADER_NOT_BEFORE = "Comb-Not-Before"


def _nats_py_errors() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """nats-py's no-responders, timeout and closed errors, if it is installed."""
    try:
        from nats import errors as ne  # type: ignore[import-not-found]
    except ImportError:
        return (), (), ()
    return (ne.NoRespondersError,), (ne.TimeoutError,), (ne.ConnectionClosedError,)


_NO_RESPONDERS, _TIMEOUTS, _CLOSED = _nats_py_errors()
CLOSED_ERRORS: tuple[type, ...] = (_nats.ConnectionClosedError,) + _CLOSED


def _page_body(limit: int, after: str) -> bytes:
    """The body of a paged info or list request."""
    body: dict[str, Any] = {}
    if limit:
        body["limit"] = limit
    if after:
        body["after"] = after
    return _wire.dumps(body)


def check_queue(queue: str) -> None:
    """Refuse names that cannot form a subject, so that they fail as a 400.

    The service checks the finer rules; the client leaves them to it, so
    that a name the service accepts is never refused by an older client.
    """
    if not queue:
        raise BadRequest(400, "empty queue name")
    if (any(c in queue for c in " \t\r\n*>") or queue.startswith(".") or queue.endswith(".")
            or ".." in queue):
        raise BadRequest(400, f"bad queue name {queue!r}")


class Client:
    """Sends Comb requests over a NATS connection.

    nc is any connection with nats-py's ``request(subject, payload,
    timeout=, headers=)`` coroutine returning a message with ``.data`` and
    ``.headers``: a nats-py connection, or the built-in one of comb._nats.
    The client does not own nc unless it was made by comb.connect.
    Durations are in seconds.
    """

    def __init__(self, nc: Any, *, prefix: str = DEFAULT_PREFIX, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.nc = nc
        self.prefix = prefix or DEFAULT_PREFIX
        self.timeout = timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT
        self._owned = False

    async def close(self) -> None:
        """Close the connection if comb.connect made it."""
        if self._owned:
            await self.nc.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the verbs

    async def push(self, queue: str, messages: Iterable[Union[Message, bytes]]) -> list[PushResult]:
        """Append messages (Message, or bare bytes for the default partition)
        and return one result per message, once they are durable. Pushing to a
        queue that does not exist creates it with default settings."""
        parts = []
        for m in messages:
            if not isinstance(m, Message):
                m = Message(data=m)
            f: dict[str, Any] = {}
            if m.partition:
                f["partition"] = m.partition
            if m.id:
                f["id"] = m.id
            if m.headers:
                f["headers"] = m.headers
            if m.delay > 0:
                f["delay_ms"] = max(1, round(m.delay * 1000))
            if m.not_before is not None:
                f["not_before"] = _wire.format_time(m.not_before)
            parts.append(_wire.object_with_data(f, m.data))
        if not parts:
            return []
        body = b'{"messages":[' + b",".join(parts) + b"]}"
        rep = await self._request("push", queue, body)
        results = [PushResult._from(r) for r in rep.get("results") or []]
        if len(results) != len(parts):
            raise CombError(500, f"{len(results)} results for {len(parts)} messages", op=f"push {queue}")
        return results

    async def put(self, queue: str, data: bytes, *, partition: str = "", id: str = "",
                  headers: Optional[dict[str, str]] = None, delay: float = 0,
                  not_before: Optional[datetime] = None) -> PushResult:
        """Append one message: its bytes are the request body, unchanged;
        partition, id and the hold (delay seconds, or not_before) go as the
        headers Comb-Partition, Comb-Id, Comb-Delay-Ms and Comb-Not-Before,
        and headers are the message's own, one value per name."""
        headers = dict(headers or {})
        if partition:
            headers[HEADER_PARTITION] = partition
        if id:
            headers[HEADER_ID] = id
        if delay > 0:
            headers[HEADER_DELAY_MS] = str(max(1, round(delay * 1000)))
        if not_before is not None:
            headers[HEADER_NOT_BEFORE] = _wire.format_time(not_before)
        rep = await self._request("put", queue, bytes(data), headers=headers or None)
        results = rep.get("results") or []
        if len(results) != 1:
            raise CombError(500, f"{len(results)} results for 1 message", op=f"put {queue}")
        return PushResult._from(results[0])

    async def pop(self, queue: str, *, group: str = "", partition: str = "", max: int = 0, partitions: int = 0,
                  wait: float = 0, lease: float = 0, auto_ack: bool = False,
                  from_: Union[str, datetime, None] = None) -> list[Delivery]:
        """Lease the next messages of a queue for a group; an empty list, not
        an error, when nothing became ready within wait seconds. Settle them
        with ack before their lease expires, or they are delivered again.
        from_ is "all" (default), "new" or a time, for a group's first pop."""
        messages, _ = await self._pop(queue, (), group=group, partition=partition, max=max, partitions=partitions,
                                      wait=wait, lease=lease, auto_ack=auto_ack, from_=from_)
        return messages

    async def ack_and_pop(self, queue: str, acks: Sequence[Ack], *, group: str = "", partition: str = "",
                          max: int = 0, partitions: int = 0, wait: float = 0, lease: float = 0,
                          auto_ack: bool = False, from_: Union[str, datetime, None] = None
                          ) -> tuple[list[Delivery], list[AckResult]]:
        """Settle acks of group and then pop as pop does, in one request (a
        pop that carries acks): one round trip where ack and then pop take
        two. Returns the messages and one result per ack, in order; an ack
        the service refuses is a result with ok False and does not stop the
        pop. Without acks it is pop."""
        return await self._pop(queue, acks, group=group, partition=partition, max=max, partitions=partitions,
                               wait=wait, lease=lease, auto_ack=auto_ack, from_=from_)

    async def _pop(self, queue: str, acks: Sequence[Ack], *, group: str, partition: str, max: int,
                   partitions: int, wait: float, lease: float, auto_ack: bool,
                   from_: Union[str, datetime, None]) -> tuple[list[Delivery], list[AckResult]]:
        req: dict[str, Any] = {}
        if group:
            req["group"] = group
        if partition:
            req["partition"] = partition
        if max:
            req["max"] = max
        if partitions:
            req["partitions"] = partitions
        if _wire.ms(wait):
            req["wait_ms"] = _wire.ms(wait)
        if _wire.ms(lease):
            req["lease_ms"] = _wire.ms(lease)
        if auto_ack:
            req["auto_ack"] = True
        if from_:
            req["from"] = _wire.format_time(from_) if isinstance(from_, datetime) else from_
        if acks:
            req["acks"] = [a._wire() for a in acks]
        rep = await self._request("pop", queue, _wire.dumps(req), extra=wait or 0)
        try:
            messages = [Delivery._from(m) for m in rep.get("messages") or []]
        except (KeyError, ValueError, TypeError) as e:
            raise CombError(500, f"malformed message in the reply: {e}", op=f"pop {queue}") from None
        results = _ack_results(rep.get("acks") or [], len(acks), f"pop {queue}") if acks else []
        return messages, results

    async def ack(self, queue: str, acks: Sequence[Ack], *, group: str = "") -> list[AckResult]:
        """Settle leased messages for a group; one result per ack. An ack the
        service refuses (an expired lease) is a result with ok False, not an
        error; an unknown status is a BadRequest for the whole request."""
        if not acks:
            return []
        req: dict[str, Any] = {"acks": [a._wire() for a in acks]}
        if group:
            req["group"] = group
        rep = await self._request("ack", queue, _wire.dumps(req))
        return _ack_results(rep.get("results") or [], len(acks), f"ack {queue}")

    async def renew(self, queue: str, leases: Sequence[str], *, lease: float = 0) -> list[RenewResult]:
        """Extend live leases by lease seconds (0: the queue's lease time) from now."""
        if not leases:
            return []
        req: dict[str, Any] = {"leases": list(leases)}
        if _wire.ms(lease):
            req["lease_ms"] = _wire.ms(lease)
        rep = await self._request("renew", queue, _wire.dumps(req))
        results = [RenewResult._from(r) for r in rep.get("results") or []]
        if len(results) != len(leases):
            raise CombError(500, f"{len(results)} results for {len(leases)} leases", op=f"renew {queue}")
        return results

    async def configure(self, queue: str, **settings: Any) -> Config:
        """Create a queue if needed, change the settings given (by their wire
        names: lease_ms=60000, max_attempts=5, ...) and return them all. With
        none, it reads the settings (creating the queue with defaults)."""
        unknown = sorted(set(settings) - set(CONFIG_FIELDS))
        if unknown:
            raise BadRequest(400, f"unknown setting {unknown[0]!r}; want one of {', '.join(CONFIG_FIELDS)}",
                             op=f"configure {queue}")
        rep = await self._request("configure", queue, _wire.dumps(settings))
        return Config._from(rep)

    async def info(self, queue: str) -> Info:
        """A queue's settings and live figures with all its partitions and
        groups, or NotFound. Reads every page (see info_page)."""
        page = await self.info_page(queue, limit=MAX_INFO_LIMIT)
        partitions, groups = list(page.partitions), list(page.groups)
        while page.next:
            page = await self.info_page(queue, limit=MAX_INFO_LIMIT, after=page.next)
            partitions += page.partitions
            groups += page.groups
        return dataclasses.replace(page, partitions=partitions, groups=groups)

    async def info_page(self, queue: str, *, limit: int = 0, after: str = "") -> Info:
        """One page of a queue's info: the whole queue's figures, up to limit
        partitions and limit groups (0: the service's default), and in next
        the cursor of the following page ("" after the last)."""
        return Info._from(await self._request("info", queue, _page_body(limit, after)))

    async def list(self) -> list[QueueSummary]:
        """A summary of every queue, by name. Reads every page (see list_page)."""
        queues, after = [], ""
        while True:
            page, after = await self.list_page(limit=MAX_LIST_LIMIT, after=after)
            queues += page
            if not after:
                return queues

    async def list_page(self, *, limit: int = 0, after: str = "") -> tuple[list[QueueSummary], str]:
        """Up to limit queues (0: the service's default) by name, after the
        cursor after, and the cursor of the following page ("" after the last)."""
        rep = await self._request("list", "", _page_body(limit, after))
        return [QueueSummary._from(q) for q in rep.get("queues") or []], rep.get("next") or ""

    async def delete(self, queue: str) -> None:
        """Delete a queue and everything in it, or raise NotFound."""
        await self._request("delete", queue, b"{}")

    async def dead_letters(self, queue: str, *, group: str = "", limit: int = 0,
                           after: str = "") -> tuple[list[DeadLetter], str]:
        """A page of dead letters, oldest first, and the cursor of the next
        page ("" after the last one)."""
        req: dict[str, Any] = {}
        if group:
            req["group"] = group
        if limit:
            req["limit"] = limit
        if after:
            req["after"] = after
        rep = await self._request("dlq", queue, _wire.dumps(req))
        try:
            return [DeadLetter._from(d) for d in rep.get("dead_letters") or []], rep.get("next", "")
        except (KeyError, ValueError, TypeError) as e:
            raise CombError(500, f"malformed dead letter in the reply: {e}", op=f"dlq {queue}") from None

    async def replay(self, queue: str, dlq_ids: Sequence[str]) -> int:
        """Push dead letters again as new messages, remove them from the list,
        and return how many were replayed."""
        if not dlq_ids:
            return 0
        rep = await self._request("dlq", queue, _wire.dumps({"replay": list(dlq_ids)}))
        return int(rep.get("done", 0))

    async def purge(self, queue: str, dlq_ids: Sequence[str]) -> int:
        """Remove dead letters without replaying them; return how many."""
        if not dlq_ids:
            return 0
        rep = await self._request("dlq", queue, _wire.dumps({"purge": list(dlq_ids)}))
        return int(rep.get("done", 0))

    async def seek(self, queue: str, to: Union[str, datetime], *, group: str = "", partition: str = "") -> int:
        """Move a group's cursors (on every partition, or one) to "start",
        "end" or a time, end its leases there, and return how many moved."""
        req: dict[str, Any] = {"to": _wire.format_time(to) if isinstance(to, datetime) else to}
        if group:
            req["group"] = group
        if partition:
            req["partition"] = partition
        rep = await self._request("seek", queue, _wire.dumps(req))
        return int(rep.get("moved", 0))

    async def consume(self, queue: str, handler: Callable[[list[Delivery]], Awaitable[None]], **options: Any) -> None:
        """Run pop loops until stop is set; see comb.consume.consume."""
        from .consume import consume

        await consume(self, queue, handler, **options)

    # --- the request

    async def _request(self, verb: str, queue: str, body: bytes, *, headers: Optional[dict[str, str]] = None,
                       extra: float = 0) -> Any:
        op = verb if verb == "list" else f"{verb} {queue}"
        if verb != "list":
            try:
                check_queue(queue)
            except BadRequest as e:
                e.op = op
                raise
        subject = f"{self.prefix}.{verb}" + (f".{queue}" if verb != "list" else "")
        timeout = self.timeout + (extra if extra and extra > 0 else 0)
        try:
            if headers:
                msg = await self.nc.request(subject, body, timeout=timeout, headers=headers)
            else:
                msg = await self.nc.request(subject, body, timeout=timeout)
        except (_nats.NoRespondersError,) + _NO_RESPONDERS:
            raise NoRespondersError(f"comb: {op}: no Comb service listens on {subject}") from None
        except (_nats.RequestTimeoutError,) + _TIMEOUTS:
            raise RequestTimeoutError(f"comb: {op}: no reply within {timeout:g}s") from None
        err = reply_error(getattr(msg, "headers", None), msg.data, op)
        if err is not None:
            raise err
        try:
            rep = _wire.loads(msg.data) if msg.data else {}
        except (ValueError, UnicodeDecodeError) as e:
            raise CombError(500, f"malformed reply: {e}", op=op) from None
        if not isinstance(rep, dict):
            raise CombError(500, "malformed reply: not a JSON object", op=op)
        return rep


async def connect(url: str = _nats.DEFAULT_URL, *, user: Optional[str] = None, password: Optional[str] = None,
                  token: Optional[str] = None, tls: Optional[ssl.SSLContext] = None,
                  tls_hostname: Optional[str] = None, prefix: str = DEFAULT_PREFIX,
                  timeout: float = DEFAULT_TIMEOUT, use_nats_py: Optional[bool] = None,
                  connect_timeout: float = 5.0) -> Client:
    """Connect to a NATS server and return a Client that owns the connection.

    It uses nats-py when it is installed (use_nats_py=None), else the
    built-in connection of comb._nats; use_nats_py=True requires nats-py,
    False forces the built-in one. url is nats://host:port or
    tls://host:port, credentials may be in it (user:password@, token@).
    """
    if use_nats_py is None or use_nats_py:
        try:
            import nats  # type: ignore[import-not-found]
        except ImportError:
            if use_nats_py:
                raise
            nats = None
        if nats is not None:
            kw: dict[str, Any] = {"servers": [url], "connect_timeout": connect_timeout,
                                  "allow_reconnect": True, "name": "comb-python"}
            if user is not None:
                kw["user"], kw["password"] = user, password
            if token is not None:
                kw["token"] = token
            if tls is not None:
                kw["tls"] = tls
            if tls_hostname is not None:
                kw["tls_hostname"] = tls_hostname
            nc = await nats.connect(**kw)
            c = Client(nc, prefix=prefix, timeout=timeout)
            c._owned = True
            return c
    nc = await _nats.connect(url, user=user, password=password, token=token, tls=tls, tls_hostname=tls_hostname,
                             connect_timeout=connect_timeout)
    c = Client(nc, prefix=prefix, timeout=timeout)
    c._owned = True
    return c


def _ack_results(raw: list[Any], n: int, op: str) -> list[AckResult]:
    """The results of n acks, checked for their count."""
    results = [AckResult(ok=bool(r.get("ok")), error=r.get("error", "")) for r in raw]
    if len(results) != n:
        raise CombError(500, f"{len(results)} results for {n} acks", op=op)
    return results
