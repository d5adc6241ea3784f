"""Errors of the Comb client.

An error reply of the service (docs/protocol.md "Errors") is a CombError,
or rather one of its subclasses by code, so that callers can write
``except comb.NotFound``. NATS-level failures are NoRespondersError (no
Comb service listens) and RequestTimeoutError (no reply in time), raised
the same whichever NATS library carries the requests.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from . import _nats

# Header names of an error reply.
HEADER_ERROR = "Nats-Service-Error"
HEADER_ERROR_CODE = "Nats-Service-Error-Code"
HEADER_RETRY_AFTER_MS = "Comb-Retry-After-Ms"

# Wire codes.
CODE_BAD_REQUEST = 400
CODE_NOT_FOUND = 404
CODE_CONFLICT = 409
CODE_TOO_LARGE = 413
CODE_LIMIT = 429
CODE_INTERNAL = 500
CODE_UNAVAILABLE = 503


class CombError(Exception):
    """An error reply of the Comb service: the request was refused.

    code is the wire code (the Nats-Service-Error-Code header), message the
    service's explanation, retry_after_ms when the same request may succeed
    (Comb-Retry-After-Ms, on a 429 of a tenant's quota; else None), and op
    the request ("pop orders"). Errors the client raises itself for a
    request it will not send (an empty queue name) are BadRequest too.
    """

    def __init__(self, code: int, message: str, retry_after_ms: Optional[int] = None, op: str = "") -> None:
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms
        self.op = op
        super().__init__(str(self))

    def __str__(self) -> str:
        s = f"{self.message} ({self.code})"
        return f"comb: {self.op}: {s}" if self.op else f"comb: {s}"

    @property
    def temporary(self) -> bool:
        """Whether the same request may succeed later unchanged: 429 and 503."""
        return self.code in (CODE_LIMIT, CODE_UNAVAILABLE)

    @staticmethod
    def of(code: int, message: str, retry_after_ms: Optional[int] = None, op: str = "") -> "CombError":
        """The CombError subclass of code (CombError itself for an unknown code)."""
        cls = _BY_CODE.get(code, CombError)
        return cls(code, message, retry_after_ms, op)


class BadRequest(CombError):
    """400: malformed JSON, a bad name, an unknown field or status. Retrying will not help."""


class NotFound(CombError):
    """404: the queue does not exist (pop, ack, renew, info, delete, dlq and seek do not create queues)."""


class Conflict(CombError):
    """409: a lease conflict the whole request depends on."""


class TooLarge(CombError):
    """413: a message or a request over its size limit."""


class LimitReached(CombError):
    """429: a queue limit or a tenant's quota is reached, or the broker is overloaded; retry later."""


class Internal(CombError):
    """500: a bug in the service; the message carries the request id it was logged under."""


class Unavailable(CombError):
    """503: PostgreSQL is unreachable or too slow, or the broker is stopping; retry later."""


_BY_CODE = {
    CODE_BAD_REQUEST: BadRequest,
    CODE_NOT_FOUND: NotFound,
    CODE_CONFLICT: Conflict,
    CODE_TOO_LARGE: TooLarge,
    CODE_LIMIT: LimitReached,
    CODE_INTERNAL: Internal,
    CODE_UNAVAILABLE: Unavailable,
}


class NoRespondersError(_nats.NatsError):
    """No Comb service listens on the request's subject (no broker, or a wrong prefix)."""


class RequestTimeoutError(_nats.NatsError, asyncio.TimeoutError):
    """No reply came within the client's timeout (plus a pop's long-poll time)."""


class DrainTimeoutError(Exception):
    """consume stopped with acks still in flight after its drain timeout.

    Their messages are delivered again if the acks were lost.
    """


class AckRefused(Exception):
    """An ack the service did not apply (an expired lease, an offset outside it)."""


def reply_error(headers: Optional[dict[str, str]], body: bytes, op: str) -> Optional[CombError]:
    """The CombError of an error reply, or None for a reply that is not one.

    The body's message is preferred to the header's: headers are single-line,
    the body need not be.
    """
    code = header(headers, HEADER_ERROR_CODE)
    if not code:
        return None
    message = header(headers, HEADER_ERROR) or ""
    try:
        n = int(code)
    except ValueError:
        return CombError.of(CODE_INTERNAL, f"malformed error code {code!r}: {message}", op=op)
    if body:
        try:
            from . import _wire

            parsed = _wire.loads(body)
            m = parsed.get("error", {}).get("message") if isinstance(parsed, dict) else None
            if isinstance(m, str) and m:
                message = m
        except (ValueError, AttributeError):
            pass
    retry = None
    try:
        v = int(header(headers, HEADER_RETRY_AFTER_MS) or "")
        if v > 0:
            retry = v
    except ValueError:
        pass
    return CombError.of(n, message or f"error {code}", retry, op)


def header(headers: Optional[dict[str, str]], name: str) -> Optional[str]:
    """A header's value, its name matched without regard to case."""
    if not headers:
        return None
    v = headers.get(name)
    if v is not None:
        return v
    low = name.lower()
    for k, v in headers.items():
        if k.lower() == low:
            return v
    return None
