// The message-bytes rules of docs/protocol.md, as clients/go's types_test.go
// checks them, without a broker.
import assert from "node:assert/strict";
import { test } from "node:test";

import { dataField, jsonText } from "@combmq/comb";
// Internal helpers, not exported by the package.
import { dataSpans, fromBase64, messageBytes, parseReply } from "../dist/data.js";

const enc = new TextEncoder();
const bytes = (s) => (typeof s === "string" ? enc.encode(s) : Uint8Array.from(s));

test("jsonText chooses data or data_b64 by the protocol's rule", () => {
  for (const [input, asJSON, comment] of [
    ['{"sku":42}', true, "compact object"],
    ["42", true, "number"],
    ['"text"', true, "string"],
    ["null", true, "null"],
    ['[1,"<&>"]', true, "HTML characters stay as they are"],
    ['{"sku": 42}', true, "inner whitespace is kept: the body is written by hand (clients/go sends it as data_b64)"],
    ['{"b":1,"a":2,"1":3}', true, "key order is the bytes' own"],
    ["1.50", true, "a number's form is the bytes' own"],
    ['"\\ud800"', true, "a lone surrogate escape is valid JSON"],
    [" 42", false, "leading space would be lost"],
    ["42\n", false, "trailing newline would be lost"],
    ["\t{}", false, "leading tab"],
    ["plain text", false, "not JSON"],
    ["", false, "an empty message has no JSON form"],
    [[0x22, 0xff, 0x22], false, "invalid UTF-8 inside a JSON string"],
    [[0x00, 0x01, 0x02], false, "binary"],
    ["\ufeff42", false, "a byte order mark is not JSON whitespace"],
    ["[1,]", false, "trailing comma"],
    ["01", false, "leading zero"],
    ['{"a":1}{"b":2}', false, "two values"],
    ['"tab\there"', false, "a raw control character in a string"],
  ]) {
    const b = bytes(input);
    const text = jsonText(b);
    if (asJSON) {
      assert.equal(text, new TextDecoder().decode(b), comment);
      assert.equal(dataField(b), `"data":${text}`, comment);
    } else {
      assert.equal(text, undefined, comment);
      assert.match(dataField(b), /^"data_b64":"[A-Za-z0-9+/=]*"$/, comment);
    }
  }
  assert.equal(dataField(new Uint8Array()), '"data_b64":""', "an empty message still carries a data field");
});

test("data nested deeper than the broker's push parser takes goes as data_b64", () => {
  const deep = (n) => bytes("[".repeat(n) + "]".repeat(n));
  assert.notEqual(jsonText(deep(8000)), undefined);
  assert.equal(jsonText(deep(9500)), undefined);
  // Brackets inside strings are not nesting.
  assert.notEqual(jsonText(bytes(JSON.stringify("[".repeat(20000)))), undefined);
});

test("a push body keeps the bytes and reads back the same", () => {
  const msgs = [bytes('{"a":"<b>&\\u2028"}'), bytes("\x00binary"), bytes('{"sku": 42}'), bytes(""), bytes("{\"data\":{\"data\":1}}")];
  const body = `{"messages":[${msgs.map((m) => `{"partition":"p",${dataField(m)}}`).join(",")}]}`;
  assert.ok(body.includes('"data":{"a":"<b>&\\u2028"}'), body);
  assert.ok(body.includes('"data_b64":""'), body);
  const back = parseReply(body);
  assert.equal(back.messages.length, msgs.length);
  back.messages.forEach((m, i) => assert.deepEqual(messageBytes(m.data, m.data_b64), msgs[i], `message ${i}`));
});

test("data: null is the four bytes null; bad base64 is an error", () => {
  const rep = parseReply('{"messages":[{"data":null}]}');
  assert.equal(new TextDecoder().decode(messageBytes(rep.messages[0].data, undefined)), "null");
  assert.throws(() => messageBytes(undefined, "!!"), /not standard base64/);
  assert.throws(() => fromBase64("AAAAA"), /not standard base64/, "a lone trailing character is not base64");
  assert.throws(() => fromBase64("AA-_"), /not standard base64/, "the URL alphabet is not the standard one");
  assert.deepEqual(fromBase64("AAE"), fromBase64("AAE="), "padding is optional");
  assert.deepEqual(fromBase64("AAE="), Uint8Array.from([0, 1]));
  assert.throws(() => messageBytes(undefined, undefined), /neither data nor data_b64/);
});

test("dataSpans finds only the messages' data members, however deep they are", () => {
  const deep = "[".repeat(20000) + "]".repeat(20000);
  const text = `{"data":1,"messages":[{"id":"data","data":${deep}},{"x":{"data":2},"data" : "s\\"}"},{"data_b64":"AA=="}],"next":""}`;
  const spans = dataSpans(text);
  assert.deepEqual(spans.map(([a, b]) => text.slice(a, b)), [deep, '"s\\"}"']);
  const rep = parseReply(text);
  assert.equal(rep.messages[0].data.raw, deep);
  assert.deepEqual(rep.messages[1].x, { data: 2 }, "data members deeper down are parsed as usual");
});

// A property test in the spirit of clients/go's FuzzEncodeDataRoundTrip: any
// bytes, written into a push body and read back as a reply, are the same bytes.
test("any bytes round-trip through a body", () => {
  let seed = 12345;
  const rand = (n) => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed % n;
  };
  const pieces = ['{"k":', "1", "]", "[", '"', "\\", "\\u00e9", "é", " ", "\n", "null", ",", "}", "\u2028", "😀"];
  for (let i = 0; i < 3000; i++) {
    let b;
    if (i % 2 === 0) {
      b = Uint8Array.from({ length: rand(12) }, () => rand(256));
    } else {
      b = bytes(Array.from({ length: rand(8) }, () => pieces[rand(pieces.length)]).join(""));
    }
    const body = `{"messages":[{${dataField(b)}}]}`;
    const m = parseReply(body).messages[0];
    assert.deepEqual(messageBytes(m.data, m.data_b64), b, `case ${i}: ${JSON.stringify([...b])}`);
  }
});
