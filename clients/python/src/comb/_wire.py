"""JSON on the wire, with message bytes kept byte for byte.

docs/protocol.md "Message bytes": bytes travel as "data" when they are one
valid JSON value, valid UTF-8, with no whitespace before or after it, else
as "data_b64". Python's json module would turn "data" into objects and
lose the exact bytes (spacing, escapes, number spelling), so requests are
spliced together around the raw bytes and replies are read by loads(),
which returns every "data" value as the exact bytes of its text.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import datetime, timezone
from typing import Any, Optional, Union

_WS = " \t\n\r"
_decoder = json.JSONDecoder()


class RawJSON(bytes):
    """The exact bytes of one JSON value in a reply."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def is_json_data(b: bytes) -> bool:
    """Whether message bytes b travel as "data": the broker's own rule."""
    if not b or b[0] in b" \t\n\r" or b[-1] in b" \t\n\r":
        return False
    try:
        s = b.decode("utf-8")
        # NaN and Infinity are Python's extensions, not JSON.
        json.loads(s, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        # Too deep for Python's parser: base64 is always correct.
        return False
    return True


def data_field(b: bytes) -> bytes:
    """The '"data":…' or '"data_b64":"…"' member for message bytes b."""
    b = bytes(b)
    if is_json_data(b):
        return b'"data":' + b
    return b'"data_b64":"' + base64.b64encode(b) + b'"'


def dumps(obj: Any) -> bytes:
    """Compact JSON of an object without message bytes."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def object_with_data(fields: dict[str, Any], data: bytes) -> bytes:
    """A JSON object of fields plus the data member of data, spliced raw."""
    head = dumps(fields)
    if head == b"{}":
        return b"{" + data_field(data) + b"}"
    return head[:-1] + b"," + data_field(data) + b"}"


def decode_data(obj: dict[str, Any]) -> bytes:
    """The message bytes of a delivered message or dead letter."""
    b64 = obj.get("data_b64")
    if b64 is not None:
        if not isinstance(b64, str):
            raise ValueError("data_b64 is not a string")
        try:
            # Padding is optional on the wire.
            return base64.b64decode(b64 + "=" * (-len(b64) % 4), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"data_b64: {e}") from None
    raw = obj.get("data")
    if isinstance(raw, RawJSON):
        return bytes(raw)
    raise ValueError("message has neither data nor data_b64")


# --- reading replies


def loads(body: Union[bytes, bytearray, memoryview]) -> Any:
    """Parse a reply; the value of every "data" key is a RawJSON."""
    s = bytes(body).decode("utf-8")
    p = _Reader(s)
    p.ws()
    v = p.value()
    p.ws()
    if p.i != len(s):
        raise ValueError(f"unexpected data after the JSON value at character {p.i}")
    return v


class _Reader:
    def __init__(self, s: str) -> None:
        self.s = s
        self.i = 0

    def ws(self) -> None:
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i

    def expect(self, c: str) -> None:
        self.ws()
        if self.i >= len(self.s) or self.s[self.i] != c:
            raise ValueError(f"expected {c!r} at character {self.i}")
        self.i += 1

    def value(self) -> Any:
        self.ws()
        if self.i >= len(self.s):
            raise ValueError("unexpected end of JSON")
        c = self.s[self.i]
        if c == "{":
            return self.object()
        if c == "[":
            return self.array()
        v, self.i = _decoder.raw_decode(self.s, self.i)
        if isinstance(v, float) and not math.isfinite(v) and self.s[self.i - 1] in "yN":
            raise ValueError("NaN and Infinity are not JSON")
        return v

    def object(self) -> dict[str, Any]:
        self.i += 1
        out: dict[str, Any] = {}
        self.ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.ws()
            if not self.s.startswith('"', self.i):
                raise ValueError(f"expected a key at character {self.i}")
            key, self.i = _decoder.raw_decode(self.s, self.i)
            self.expect(":")
            self.ws()
            if key == "data":
                start = self.i
                self.i = skip_value(self.s, self.i)
                out[key] = RawJSON(self.s[start : self.i].encode("utf-8"))
            else:
                out[key] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            self.expect("}")
            return out

    def array(self) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            self.expect("]")
            return out


def skip_value(s: str, i: int) -> int:
    """The end of the JSON value that starts at s[i], without recursion.

    It checks the brackets and strings, enough to find the end of what the
    broker wrote; the scalars are checked by raw_decode.
    """
    stack: list[str] = []
    n = len(s)
    while True:
        while i < n and s[i] in _WS:
            i += 1
        if i >= n:
            raise ValueError("unexpected end of JSON in data")
        c = s[i]
        if c in "{[":
            stack.append("}" if c == "{" else "]")
            i += 1
            while i < n and s[i] in _WS:
                i += 1
            if i < n and s[i] == stack[-1]:
                stack.pop()
                i += 1
            else:
                if c == "{":
                    i = _key(s, i)
                continue
        else:
            if c == '"':
                _, i = json.decoder.scanstring(s, i + 1)
            else:
                _, i = _decoder.raw_decode(s, i)
        # After a value: close containers, or go on to the next element.
        while True:
            if not stack:
                return i
            while i < n and s[i] in _WS:
                i += 1
            if i < n and s[i] == ",":
                i += 1
                if stack[-1] == "}":
                    i = _key(s, i)
                break
            if i < n and s[i] == stack[-1]:
                stack.pop()
                i += 1
                continue
            raise ValueError(f"malformed JSON in data at character {i}")


def _key(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WS:
        i += 1
    if i >= n or s[i] != '"':
        raise ValueError(f"expected a key in data at character {i}")
    _, i = json.decoder.scanstring(s, i + 1)
    while i < n and s[i] in _WS:
        i += 1
    if i >= n or s[i] != ":":
        raise ValueError(f"expected ':' in data at character {i}")
    return i + 1


# --- units


def ms(seconds: Optional[float]) -> int:
    """Whole milliseconds of a duration in seconds; a positive value under
    a millisecond is 1, so that it never turns into "the default"."""
    if not seconds or seconds <= 0:
        return 0
    return max(1, int(seconds * 1000))


def parse_time(v: Any) -> Optional[datetime]:
    """An RFC 3339 time of a reply (nanoseconds cut to microseconds)."""
    if not v:
        return None
    if not isinstance(v, str):
        raise ValueError(f"time {v!r} is not a string")
    s = v.replace("z", "Z")
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    # fromisoformat takes at most 6 fractional digits in some versions.
    dot = s.find(".")
    if dot >= 0:
        end = dot + 1
        while end < len(s) and s[end].isdigit():
            end += 1
        frac = s[dot + 1 : end][:6].ljust(6, "0")
        s = s[: dot + 1] + frac + s[end:]
    t = datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t


def format_time(t: datetime) -> str:
    """An RFC 3339 time for a request (from, seek's to); naive means UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
