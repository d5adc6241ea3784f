"""Message bytes on the wire (docs/protocol.md "Message bytes"): which field
they take, and that they come back byte for byte."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comb import _wire

# The cases of clients/go/types_test.go and the broker's IsJSONData test.
# Unlike the Go client, which must re-encode JSON and so sends only compact
# JSON as "data", this client splices the bytes in verbatim and follows the
# broker's rule exactly: JSON with inner spaces travels as "data" too.
AS_DATA = [
    b'{"sku":42}', b"42", b'"text"', b"null", b'[1,"<&>"]', b'{"sku": 42}', b"[1, 2]", b"{}", b"-1.5e3",
    b"true", b'"caf\\u00e9"', '"é"'.encode(), b'"\\ud800"', b'{"a":"<b>&\\u2028"}', b"1e400",
]
AS_B64 = [
    b" 42", b"1 ", b"{}\n", b"plain text", b"", b'"\xff"', b"\x00\x01\x02", b"{", b"nope", b"01", b"1 2",
    b"'s'", b"\x00", b"NaN", b"Infinity", b"-Infinity", b"[NaN]", b'{"a":Infinity}', b"\xef\xbb\xbf1",
    b'"\x01"', b"[" * 5000 + b"]" * 5000, b"\xed\xa0\x80",
]


@pytest.mark.parametrize("b", AS_DATA)
def test_json_goes_as_data(b):
    assert _wire.is_json_data(b)
    assert _wire.data_field(b) == b'"data":' + b


@pytest.mark.parametrize("b", AS_B64)
def test_other_bytes_go_as_base64(b):
    assert not _wire.is_json_data(b)
    assert _wire.data_field(b) == b'"data_b64":"' + base64.b64encode(b) + b'"'


def test_empty_message_still_has_a_field():
    assert _wire.object_with_data({}, b"") == b'{"data_b64":""}'
    assert _wire.object_with_data({"partition": "p"}, b"1") == b'{"partition":"p","data":1}'


def test_reply_data_is_kept_verbatim():
    body = ('{"messages":[{"partition":"eu","offset":0,"data":{"b": [1, 2.50, "\\u00e9"] ,"a":null}},'
            '{"partition":"x","offset":1,"data_b64":"AAEC"},{"partition":"y","offset":2,"data_b64":"AAE"},'
            '{"partition":"z","offset":3,"data":"é"}]}').encode()
    rep = _wire.loads(body)
    got = [_wire.decode_data(m) for m in rep["messages"]]
    # The value ends where the JSON value ends: the space before the comma is not part of it.
    assert got[0] == b'{"b": [1, 2.50, "\\u00e9"] ,"a":null}'
    assert got[1:] == [b"\x00\x01\x02", b"\x00\x01", '"é"'.encode()]
    assert rep["messages"][1]["partition"] == "x"


def test_deep_data_in_a_reply_does_not_recurse():
    deep = b"[" * 50000 + b"]" * 50000
    rep = _wire.loads(b'{"messages":[{"data":' + deep + b',"offset":1}]}')
    assert _wire.decode_data(rep["messages"][0]) == deep


@pytest.mark.parametrize("body", [
    b'{"data":[1,}', b'{"data":{"a"}}', b'{"data":', b'{"a":NaN}', b'{"data":1} x', b'[1,', b'{"a" 1}',
    b'{"data_b64":"!!"}', b'{"data":{"a":1,}}', b"\xff",
])
def test_malformed_replies_raise_value_error(body):
    with pytest.raises(ValueError):
        rep = _wire.loads(body)
        _wire.decode_data(rep)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4),
    max_leaves=10,
)
# JSON as people write it: compact, indented, with non-ASCII unescaped.
JSON_TEXTS = st.tuples(JSON_VALUES, st.sampled_from([None, 0, 2]), st.booleans()).map(
    lambda t: json.dumps(t[0], indent=t[1], ensure_ascii=t[2]).encode("utf-8", "surrogatepass"))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=64), JSON_TEXTS))
def test_round_trip(b):
    body = b'{"messages":[' + _wire.object_with_data({"partition": "p"}, b) + b"]}"
    rep = _wire.loads(body)
    assert _wire.decode_data(rep["messages"][0]) == b


def test_ms():
    assert _wire.ms(0) == 0
    assert _wire.ms(-1) == 0
    assert _wire.ms(None) == 0
    assert _wire.ms(1e-6) == 1
    assert _wire.ms(1.5) == 1500


def test_times():
    t = _wire.parse_time("2026-11-30T16:51:37.967061234Z")
    assert t == datetime(2026, 11, 30, 16, 51, 37, 967061, tzinfo=timezone.utc)
    assert _wire.parse_time("2026-11-30T16:51:37Z").microsecond == 0
    assert _wire.parse_time("2026-11-30T17:51:37.5+01:00") == datetime(2026, 11, 30, 16, 51, 37, 500000,
                                                                      tzinfo=timezone.utc)
    assert _wire.format_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))) == \
        "2026-01-02T01:04:05Z"
