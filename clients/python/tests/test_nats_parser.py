"""The built-in NATS connection's parser: any chunking of a stream yields
the same operations, and garbage is a ProtocolError, never a crash."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comb import _nats
from comb._nats import Msg, Parser, ProtocolError

# A stream as a server sends it, with the awkward cases: CRLF and protocol
# words inside payloads, an empty payload, headers with a status line, a
# header-only message, lower-case verbs, and every control operation.
def hmsg(subject: bytes, sid: int, reply: bytes, hdr: bytes, payload: bytes) -> bytes:
    args = [subject, b"%d" % sid] + ([reply] if reply else []) + [b"%d" % len(hdr), b"%d" % (len(hdr) + len(payload))]
    return b"HMSG " + b" ".join(args) + b"\r\n" + hdr + payload + b"\r\n"


STREAM = b"".join([
    b'INFO {"server_id":"S","version":"2.15.2","max_payload":8388608,"headers":true}\r\n',
    b"+OK\r\n",
    b"PING\r\n",
    b"MSG foo.bar 1 5\r\nhello\r\n",
    b"MSG foo.bar 1 _INBOX.x.1 13\r\nMSG a 1 2\r\n\r\n\r\n",
    b"MSG empty 2 0\r\n\r\n",
    hmsg(b"_INBOX.x.2", 3, b"", b"NATS/1.0 503\r\n\r\n", b""),
    hmsg(b"svc.reply", 3, b"_INBOX.x.3",
         b"NATS/1.0\r\nNats-Service-Error-Code: 404\r\nNats-Service-Error: not found\r\n\r\n", b'{"a"}'),
    hmsg(b"q", 4, b"", b"NATS/1.0 408 Request Timeout\r\nK: v1\r\nK: v2\r\n\r\n", b"hi"),
    b"pong\r\n",
    b"-ERR 'Authorization Violation'\r\n",
    b'INFO {"connect_urls":["127.0.0.1:4223"]}\r\n',
])


def expected_ops():
    return [
        ("INFO", {"server_id": "S", "version": "2.15.2", "max_payload": 8388608, "headers": True}),
        ("OK", None),
        ("PING", None),
        ("MSG", Msg("foo.bar", "", b"hello", None, 1)),
        ("MSG", Msg("foo.bar", "_INBOX.x.1", b"MSG a 1 2\r\n\r\n", None, 1)),
        ("MSG", Msg("empty", "", b"", None, 2)),
        ("MSG", Msg("_INBOX.x.2", "", b"", {"Status": "503"}, 3)),
        ("MSG", Msg("svc.reply", "_INBOX.x.3", b'{"a"}',
                    {"Nats-Service-Error-Code": "404", "Nats-Service-Error": "not found"}, 3)),
        ("MSG", Msg("q", "", b"hi", {"Status": "408", "Description": "Request Timeout", "K": "v1"}, 4)),
        ("PONG", None),
        ("ERR", "Authorization Violation"),
        ("INFO", {"connect_urls": ["127.0.0.1:4223"]}),
    ]


def feed_chunks(stream: bytes, cuts: list[int]) -> list:
    p = Parser()
    ops = []
    prev = 0
    for c in sorted(set(cuts)) + [len(stream)]:
        ops += p.feed(stream[prev:c])
        prev = c
    return ops


def test_whole_stream():
    assert Parser().feed(STREAM) == expected_ops()


def test_byte_by_byte():
    p = Parser()
    ops = []
    for i in range(len(STREAM)):
        ops += p.feed(STREAM[i : i + 1])
    assert ops == expected_ops()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_chunking_yields_the_same_ops(cuts):
    assert feed_chunks(STREAM, cuts) == expected_ops()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=8))
def test_garbage_is_a_protocol_error_or_ops(data, cuts):
    try:
        feed_chunks(data, [c for c in cuts if c <= len(data)])
    except ProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_garbage_after_a_valid_prefix(prefix, tail):
    try:
        Parser().feed(STREAM[: len(prefix)] + tail)
    except ProtocolError:
        pass


@pytest.mark.parametrize("bad", [
    b"MSG a 1\r\n",                       # no size
    b"MSG a x 3\r\nabc\r\n",              # sid not a number
    b"MSG a 1 -1\r\n",                    # negative size
    b"MSG a 1 3\r\nabcXY",                # payload not followed by CRLF
    b"HMSG a 1 10 5\r\n",                 # header longer than the message
    b"HMSG a 1 5 5\r\nHTTP/\r\n",         # not a NATS header block
    b"HMSG a 1 16 16\r\nNATS/1.0\r\nxx\r\n\r\n\r\n",  # header line without a colon
    b"INFO [1]\r\n",                      # INFO not an object
    b"INFO {\r\n",                        # INFO not JSON
    b"INFO " + b"[" * 100000 + b"\r\n",   # INFO too deep for json
    b"FROB\r\n",                          # unknown operation
    b"MSG a 1 99999999999\r\n",           # over max_payload
    b"M" * (_nats.MAX_CONTROL_LINE + 2),  # control line without end
])
def test_bad_input_is_a_protocol_error(bad):
    with pytest.raises(ProtocolError):
        Parser().feed(bad)


def test_headers_round_trip():
    block = _nats.encode_headers({"Comb-Partition": "eu", "Comb-Id": "order 8: é"})
    assert _nats.parse_headers(block) == {"Comb-Partition": "eu", "Comb-Id": "order 8: é"}
    for bad in ({"a:b": "v"}, {"a": "v\r\nX: y"}, {"": "v"}, {"a b": "v"}):
        with pytest.raises(ValueError):
            _nats.encode_headers(bad)


# A recorded stream: the bytes a real broker sent to a raw socket for a
# CONNECT, a SUB, a few requests (one with an error reply) and a PING.

async def _record(broker) -> bytes:
    from conftest import TOKEN

    r, w = await asyncio.open_connection(broker.host, broker.port)
    got = bytearray(await r.readline())
    connect = {"verbose": False, "headers": True, "no_responders": True, "auth_token": TOKEN, "protocol": 1}
    w.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nSUB _INBOX.rec.* 1\r\n")
    w.write(b'PUB comb.put.recorded _INBOX.rec.1 11\r\n{"sku": 42}\r\n')
    w.write(b'PUB comb.pop.recorded _INBOX.rec.2 2\r\n{}\r\n')
    w.write(b'PUB comb.info.no-such-queue _INBOX.rec.3 0\r\n\r\n')
    w.write(b'PUB nobody.listens _INBOX.rec.4 0\r\n\r\n')
    w.write(b"PING\r\n")
    await w.drain()
    replies = 0
    while True:
        chunk = await asyncio.wait_for(r.read(65536), 10)
        assert chunk, "broker closed the connection"
        got += chunk
        replies = len([op for op in Parser().feed(bytes(got)) if op[0] in ("MSG", "PONG")])
        if replies >= 5:
            break
    w.close()
    return bytes(got)


async def test_recorded_stream_any_chunking(plain):
    stream = await _record(plain)
    whole = Parser().feed(stream)
    msgs = [op[1] for op in whole if op[0] == "MSG"]
    assert len(msgs) == 4
    by_subject = {m.subject: m for m in msgs}
    assert b'"status":"stored"' in by_subject["_INBOX.rec.1"].data
    assert by_subject["_INBOX.rec.3"].headers["Nats-Service-Error-Code"] == "404"
    assert by_subject["_INBOX.rec.4"].headers["Status"] == "503"  # no responders

    import random

    rnd = random.Random(12)
    for _ in range(300):
        cuts = [rnd.randrange(len(stream) + 1) for _ in range(rnd.randrange(1, 30))]
        assert feed_chunks(stream, cuts) == whole
