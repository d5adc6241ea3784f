"""A small asyncio NATS connection, used when nats-py is not installed.

This module is hand-written because nats-py could not be installed on the
machines this client is built and tested on (no PyPI, no Debian package).
It is the minimum the Comb client needs, and no more: one server, INFO and
CONNECT (user and password, or a token), PUB/HPUB, SUB/UNSUB, MSG/HMSG,
PING/PONG, requests over one muxed inbox with timeouts, the no-responders
status, and TLS. It does not reconnect, follow cluster URLs, speak
JetStream or nkeys/creds. With nats-py installed, prefer it: pass its
connection to comb.Client, which needs only its ``request`` coroutine.

The parser (Parser) is free of I/O, so it can be fed any chunking of a
byte stream; the tests do exactly that.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import ssl as _ssl
import string
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import unquote, urlsplit

__all__ = [
    "Msg",
    "Parser",
    "ProtocolError",
    "NatsError",
    "NoRespondersError",
    "RequestTimeoutError",
    "ConnectionClosedError",
    "Connection",
    "connect",
]

# Bounds on what a server may send before the connection is called broken:
# nats-server's own default max_control_line is 4 KiB; we allow more, since
# a long subject plus a reply inbox may pass it with custom server settings.
MAX_CONTROL_LINE = 64 * 1024
# A MSG larger than this is refused even if INFO announced a larger
# max_payload (nats-server caps max_payload at 64 MiB).
MAX_PAYLOAD_CAP = 64 * 1024 * 1024

CRLF = b"\r\n"
HEADER_LINE = b"NATS/1.0"
STATUS_HDR = "Status"
DESCRIPTION_HDR = "Description"
NO_RESPONDERS_STATUS = "503"

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_PORT = 4222


class NatsError(Exception):
    """A NATS-level failure: not an answer of the Comb service."""


class ProtocolError(NatsError):
    """The server sent bytes that are not the NATS protocol."""


class NoRespondersError(NatsError):
    """Nobody subscribes to the request's subject (status 503)."""


class RequestTimeoutError(NatsError, asyncio.TimeoutError):
    """No reply came within the request's timeout."""


class ConnectionClosedError(NatsError):
    """The connection is closed; this module does not reconnect."""


@dataclass
class Msg:
    """One message, as nats-py's Msg: subject, reply, data and headers."""

    subject: str
    reply: str = ""
    data: bytes = b""
    headers: Optional[dict[str, str]] = None
    sid: int = 0


# Operations the parser yields: ("INFO", dict), ("MSG", Msg), ("PING", None),
# ("PONG", None), ("OK", None), ("ERR", str).
Op = tuple[str, Any]


def parse_headers(block: bytes) -> dict[str, str]:
    """Parse a header block ("NATS/1.0[ status[ text]]\\r\\n(k: v\\r\\n)*\\r\\n").

    The status line's code goes into the "Status" header and its text into
    "Description", as nats-py does. The first value of a repeated key wins.
    """
    if not block.startswith(HEADER_LINE):
        raise ProtocolError(f"header block does not start with NATS/1.0: {block[:32]!r}")
    if not block.endswith(CRLF + CRLF) and block != HEADER_LINE + CRLF + CRLF:
        raise ProtocolError("header block does not end with an empty line")
    lines = block[: -len(CRLF + CRLF)].split(CRLF)
    hdrs: dict[str, str] = {}
    status = lines[0][len(HEADER_LINE):].strip()
    if status:
        code, _, text = status.partition(b" ")
        hdrs[STATUS_HDR] = code.decode("ascii", "replace")
        if text.strip():
            hdrs[DESCRIPTION_HDR] = text.strip().decode("utf-8", "replace")
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if not sep or not key.strip():
            raise ProtocolError(f"malformed header line {line[:64]!r}")
        k = key.strip().decode("utf-8", "replace")
        hdrs.setdefault(k, value.strip().decode("utf-8", "replace"))
    return hdrs


def encode_headers(headers: dict[str, str]) -> bytes:
    """The header block of HPUB for headers; refuses what would break framing."""
    out = [HEADER_LINE, CRLF]
    for k, v in headers.items():
        k, v = str(k), str(v)
        if not k or any(c in k for c in ":\r\n ") or any(c in v for c in "\r\n"):
            raise ValueError(f"bad header {k!r}: {v!r}: no CR, LF, and no colon or space in the key")
        out += [k.encode(), b": ", v.encode(), CRLF]
    out.append(CRLF)
    return b"".join(out)


class Parser:
    """An incremental parser of the server side of the NATS protocol.

    feed() takes any chunk of the stream and returns the operations it
    completed, in order; bytes of an incomplete operation are kept for the
    next call. Anything that is not the protocol raises ProtocolError, after
    which the parser must not be used again.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD_CAP) -> None:
        self._buf = bytearray()
        # The MSG/HMSG whose payload is awaited: (subject, sid, reply, hdr_len, total).
        self._pending: Optional[tuple[str, int, str, int, int]] = None
        self.max_payload = max_payload

    def feed(self, data: bytes) -> list[Op]:
        self._buf += data
        ops: list[Op] = []
        while True:
            op = self._next()
            if op is None:
                return ops
            ops.append(op)

    def _next(self) -> Optional[Op]:
        buf = self._buf
        if self._pending is not None:
            subject, sid, reply, hdr_len, total = self._pending
            if len(buf) < total + 2:
                return None
            if buf[total : total + 2] != CRLF:
                raise ProtocolError("message payload is not followed by CRLF")
            headers = parse_headers(bytes(buf[:hdr_len])) if hdr_len >= 0 else None
            data = bytes(buf[max(hdr_len, 0) : total])
            del buf[: total + 2]
            self._pending = None
            return ("MSG", Msg(subject=subject, reply=reply, data=data, headers=headers, sid=sid))

        end = buf.find(CRLF)
        if end < 0:
            if len(buf) > MAX_CONTROL_LINE:
                raise ProtocolError(f"control line longer than {MAX_CONTROL_LINE} bytes")
            return None
        if end > MAX_CONTROL_LINE:
            raise ProtocolError(f"control line longer than {MAX_CONTROL_LINE} bytes")
        line = bytes(buf[:end])
        del buf[: end + 2]
        verb, _, rest = line.partition(b" ")
        verb = verb.upper()
        if verb == b"MSG":
            self._pending = self._msg_args(rest, headers=False)
            return self._next()
        if verb == b"HMSG":
            self._pending = self._msg_args(rest, headers=True)
            return self._next()
        if verb == b"PING":
            return ("PING", None)
        if verb == b"PONG":
            return ("PONG", None)
        if verb == b"+OK":
            return ("OK", None)
        if verb == b"-ERR":
            return ("ERR", rest.strip().strip(b"'").decode("utf-8", "replace"))
        if verb == b"INFO":
            try:
                info = json.loads(rest)
            except (ValueError, RecursionError) as e:
                raise ProtocolError(f"malformed INFO: {e}") from None
            if not isinstance(info, dict):
                raise ProtocolError("INFO is not a JSON object")
            return ("INFO", info)
        raise ProtocolError(f"unknown protocol operation {line[:64]!r}")

    def _msg_args(self, rest: bytes, headers: bool) -> tuple[str, int, str, int, int]:
        args = rest.split()
        need = (4, 5) if headers else (3, 4)
        if len(args) not in need:
            raise ProtocolError(f"malformed {'HMSG' if headers else 'MSG'} arguments {rest[:128]!r}")
        try:
            subject = args[0].decode("utf-8")
            sid = int(args[1])
            reply = args[2].decode("utf-8") if len(args) == need[1] else ""
            if headers:
                hdr_len, total = int(args[-2]), int(args[-1])
            else:
                hdr_len, total = -1, int(args[-1])
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError(f"malformed message arguments {rest[:128]!r}") from None
        if total < 0 or total > self.max_payload or (headers and not 0 <= hdr_len <= total):
            raise ProtocolError(f"bad message sizes in {rest[:128]!r}")
        return (subject, sid, reply, hdr_len, total)


def _check_subject(subject: str, what: str = "subject") -> bytes:
    if not subject or any(c in string.whitespace for c in subject):
        raise ValueError(f"bad {what} {subject!r}: it must be non-empty, without spaces or control characters")
    return subject.encode("utf-8")


@dataclass
class Subscription:
    """A subscription made with Connection.subscribe."""

    conn: "Connection"
    sid: int
    subject: str
    cb: Callable[[Msg], Awaitable[None]] = field(repr=False)

    async def unsubscribe(self) -> None:
        await self.conn._unsubscribe(self.sid)


class Connection:
    """One connection to one NATS server; build it with connect()."""

    def __init__(self) -> None:
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._parser = Parser()
        self.server_info: dict[str, Any] = {}
        self.max_payload = 1024 * 1024
        self._subs: dict[int, Subscription] = {}
        self._next_sid = 1
        self._pongs: list[asyncio.Future[None]] = []
        self._inbox_prefix = "_INBOX." + secrets.token_hex(11)
        self._inbox_sid = 0
        self._requests: dict[str, asyncio.Future[Msg]] = {}
        self._next_token = 0
        self._reader_task: Optional[asyncio.Task[None]] = None
        self._closed: Optional[BaseException] = None
        self.last_error: Optional[str] = None
        # Operations parsed during the handshake and not yet handled.
        self._handshake_ops: list[Op] = []
        # Callback tasks of subscriptions, kept so they are not collected.
        self._cb_tasks: set[asyncio.Task[None]] = set()

    # --- connecting

    async def _open(self, url: str, user: Optional[str], password: Optional[str], token: Optional[str],
                    tls: Optional[_ssl.SSLContext], tls_hostname: Optional[str], name: str,
                    timeout: float) -> None:
        u = urlsplit(url if "://" in url else "nats://" + url)
        if u.scheme not in ("nats", "tls"):
            raise ValueError(f"bad NATS URL {url!r}: the scheme must be nats:// or tls://")
        host = u.hostname or "127.0.0.1"
        port = u.port or DEFAULT_PORT
        if u.username is not None and user is None and token is None:
            if u.password is not None:
                user, password = unquote(u.username), unquote(u.password)
            else:
                token = unquote(u.username)
        if u.scheme == "tls" and tls is None:
            tls = _ssl.create_default_context()

        reader, writer = await asyncio.open_connection(host, port)
        self._reader, self._writer = reader, writer
        try:
            op = await self._read_op()
            if op[0] != "INFO":
                raise ProtocolError(f"expected INFO first, got {op[0]}")
            self._set_info(op[1])
            if self.server_info.get("tls_required") and tls is None:
                raise NatsError(f"server {host}:{port} requires TLS: use a tls:// URL or pass an ssl context")
            if tls is not None:
                if not self.server_info.get("tls_required") and not self.server_info.get("tls_available"):
                    raise NatsError(f"TLS requested, but server {host}:{port} does not offer it")
                await writer.start_tls(tls, server_hostname=tls_hostname or host)
            connect = {
                "verbose": False,
                "pedantic": False,
                "tls_required": tls is not None,
                "name": name,
                "lang": "python3",
                "version": _version(),
                "protocol": 1,
                "headers": True,
                "no_responders": True,
            }
            if user is not None:
                connect["user"] = user
                connect["pass"] = password or ""
            if token is not None:
                connect["auth_token"] = token
            writer.write(b"CONNECT " + json.dumps(connect).encode() + CRLF + b"PING" + CRLF)
            await writer.drain()
            while True:
                op = await self._read_op()
                if op[0] == "PONG":
                    break
                if op[0] == "ERR":
                    raise NatsError(f"server {host}:{port} refused the connection: {op[1]}")
                if op[0] == "INFO":
                    self._set_info(op[1])
                elif op[0] == "PING":
                    writer.write(b"PONG" + CRLF)
        except BaseException:
            writer.close()
            raise
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    def _set_info(self, info: dict[str, Any]) -> None:
        self.server_info.update(info)
        mp = info.get("max_payload")
        if isinstance(mp, int) and mp > 0:
            self.max_payload = mp
            self._parser.max_payload = min(max(mp, 1), MAX_PAYLOAD_CAP)

    async def _read_op(self) -> Op:
        """Read until the parser yields one op; only before the read loop runs."""
        assert self._reader is not None
        while True:
            if self._handshake_ops:
                return self._handshake_ops.pop(0)
            chunk = await self._reader.read(65536)
            if not chunk:
                raise ConnectionClosedError("connection closed by the server" +
                                            (f": {self.last_error}" if self.last_error else ""))
            self._handshake_ops.extend(self._parser.feed(chunk))

    # --- the read loop

    async def _read_loop(self) -> None:
        assert self._reader is not None
        err: BaseException = ConnectionClosedError("connection closed by the server")
        try:
            for op in self._handshake_ops:
                self._dispatch(op)
            self._handshake_ops = []
            while True:
                chunk = await self._reader.read(65536)
                if not chunk:
                    break
                for op in self._parser.feed(chunk):
                    self._dispatch(op)
        except asyncio.CancelledError:
            err = ConnectionClosedError("connection closed")
        except (OSError, ProtocolError) as e:
            err = ConnectionClosedError(f"connection lost: {e}")
        finally:
            if self.last_error and "closed by the server" in str(err):
                err = ConnectionClosedError(f"connection closed by the server: {self.last_error}")
            self._shutdown(err)

    def _dispatch(self, op: Op) -> None:
        kind, arg = op
        if kind == "MSG":
            self._deliver(arg)
        elif kind == "PING":
            self._write(b"PONG" + CRLF)
        elif kind == "PONG":
            if self._pongs:
                f = self._pongs.pop(0)
                if not f.done():
                    f.set_result(None)
        elif kind == "INFO":
            self._set_info(arg)
        elif kind == "ERR":
            self.last_error = arg

    def _deliver(self, msg: Msg) -> None:
        if msg.sid == self._inbox_sid and self._inbox_sid:
            token = msg.subject[len(self._inbox_prefix) + 1 :]
            f = self._requests.pop(token, None)
            if f is None or f.done():
                return  # a late reply to a request that timed out
            if msg.headers and msg.headers.get(STATUS_HDR) == NO_RESPONDERS_STATUS and not msg.data:
                f.set_exception(NoRespondersError("no responders on the request's subject"))
            else:
                f.set_result(msg)
            return
        sub = self._subs.get(msg.sid)
        if sub is not None:
            t = asyncio.get_running_loop().create_task(sub.cb(msg))
            self._cb_tasks.add(t)
            t.add_done_callback(self._cb_tasks.discard)

    def _shutdown(self, err: BaseException) -> None:
        if self._closed is not None:
            return
        self._closed = err
        for f in self._pongs:
            if not f.done():
                f.set_exception(err)
        self._pongs.clear()
        for f in self._requests.values():
            if not f.done():
                f.set_exception(err)
        self._requests.clear()
        if self._writer is not None:
            self._writer.close()

    # --- writing

    def _write(self, b: bytes) -> None:
        if self._closed is not None:
            raise ConnectionClosedError(str(self._closed))
        assert self._writer is not None
        self._writer.write(b)

    async def _flush_writes(self) -> None:
        assert self._writer is not None
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._shutdown(ConnectionClosedError(f"connection lost: {e}"))
            raise ConnectionClosedError(f"connection lost: {e}") from None

    def _pub_frame(self, subject: str, payload: bytes, reply: str, headers: Optional[dict[str, str]]) -> bytes:
        subj = _check_subject(subject)
        rep = b" " + _check_subject(reply, "reply subject") if reply else b""
        payload = bytes(payload)
        if headers:
            hdr = encode_headers(headers)
            total = len(hdr) + len(payload)
            self._check_size(total)
            return b"".join([b"HPUB ", subj, rep, b" %d %d\r\n" % (len(hdr), total), hdr, payload, CRLF])
        self._check_size(len(payload))
        return b"".join([b"PUB ", subj, rep, b" %d\r\n" % len(payload), payload, CRLF])

    def _check_size(self, n: int) -> None:
        if n > self.max_payload:
            raise ValueError(f"message of {n} bytes is over the server's max_payload of {self.max_payload}")

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "",
                      headers: Optional[dict[str, str]] = None) -> None:
        """Publish one message (PUB, or HPUB with headers)."""
        self._write(self._pub_frame(subject, payload, reply, headers))
        await self._flush_writes()

    async def subscribe(self, subject: str, queue: str = "",
                        cb: Optional[Callable[[Msg], Awaitable[None]]] = None) -> Subscription:
        """Subscribe; cb runs as a task for each message."""
        if cb is None:
            raise ValueError("subscribe needs a callback")
        sid = self._new_sid()
        line = b"SUB " + _check_subject(subject) + (b" " + _check_subject(queue, "queue group") if queue else b"")
        sub = Subscription(self, sid, subject, cb)
        self._subs[sid] = sub
        self._write(line + b" %d\r\n" % sid)
        await self._flush_writes()
        return sub

    async def _unsubscribe(self, sid: int) -> None:
        if self._subs.pop(sid, None) is not None and self._closed is None:
            self._write(b"UNSUB %d\r\n" % sid)
            await self._flush_writes()

    def _new_sid(self) -> int:
        sid = self._next_sid
        self._next_sid += 1
        return sid

    async def flush(self, timeout: float = 10.0) -> None:
        """Round-trip a PING, so that everything written before has been read by the server."""
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._write(b"PING" + CRLF)
        self._pongs.append(f)
        await self._flush_writes()
        try:
            await asyncio.wait_for(asyncio.shield(f), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"no PONG within {timeout}s") from None

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 0.5,
                      headers: Optional[dict[str, str]] = None) -> Msg:
        """Send a request and wait for its one reply, as nats-py's request.

        Raises NoRespondersError when nobody listens, RequestTimeoutError
        when no reply comes within timeout, ConnectionClosedError when the
        connection is gone.
        """
        if self._closed is not None:
            raise ConnectionClosedError(str(self._closed))
        loop = asyncio.get_running_loop()
        if not self._inbox_sid:
            self._inbox_sid = self._new_sid()
            self._write(b"SUB " + self._inbox_prefix.encode() + b".* %d\r\n" % self._inbox_sid)
        self._next_token += 1
        token = format(self._next_token, "x")
        frame = self._pub_frame(subject, payload, f"{self._inbox_prefix}.{token}", headers)
        f: asyncio.Future[Msg] = loop.create_future()
        self._requests[token] = f
        try:
            self._write(frame)
            await self._flush_writes()
            return await asyncio.wait_for(f, timeout)
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"no reply on {subject} within {timeout:g}s") from None
        finally:
            self._requests.pop(token, None)

    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    async def close(self) -> None:
        """Close the connection; pending requests fail with ConnectionClosedError."""
        if self._reader_task is not None and not self._reader_task.done():
            if self._closed is None and self._writer is not None:
                try:
                    await self.flush(timeout=2)
                except NatsError:
                    pass
            self._reader_task.cancel()
            try:
                await self._reader_task
            except asyncio.CancelledError:
                pass
        self._shutdown(ConnectionClosedError("connection closed"))
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (OSError, _ssl.SSLError):
                pass

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "0"


async def connect(url: str = DEFAULT_URL, *, user: Optional[str] = None, password: Optional[str] = None,
                  token: Optional[str] = None, tls: Optional[_ssl.SSLContext] = None,
                  tls_hostname: Optional[str] = None, name: str = "comb-python",
                  connect_timeout: float = 5.0) -> Connection:
    """Connect to one NATS server.

    url is nats://host:port or tls://host:port, optionally with
    user:password@ or token@ in it. tls, an ssl.SSLContext, turns TLS on
    for a nats:// URL too (a tls:// URL without it uses the system's
    trust store). The returned connection is ready for requests.
    """
    c = Connection()
    try:
        await asyncio.wait_for(c._open(url, user, password, token, tls, tls_hostname, name, connect_timeout),
                               connect_timeout)
    except asyncio.TimeoutError:
        raise NatsError(f"could not connect to {url} within {connect_timeout:g}s") from None
    except OSError as e:
        raise NatsError(f"could not connect to {url}: {e}") from None
    return c
