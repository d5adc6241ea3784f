// Message bytes on the wire (docs/protocol.md, "Message bytes"): "data" when
// the bytes are one valid JSON value, valid UTF-8, with no whitespace around
// it; "data_b64" otherwise. Request bodies that carry message data are
// written by hand, so that the bytes appear verbatim, and replies that carry
// it are read with a scanner that cuts each "data" value out of the text,
// so that it is handed back byte for byte: JSON.parse alone would turn it into
// a value, and writing that value again changes spacing, number forms and
// key order.

const utf8 = new TextEncoder();
// fatal: invalid UTF-8 is an error, not U+FFFD; ignoreBOM: a leading BOM is
// kept as a character (and so makes the bytes not JSON), never dropped.
const strictUTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The bytes of a message: a Uint8Array as is, a string as its UTF-8 encoding. */
export type Data = Uint8Array | string;

/** bytes returns the message bytes of d. */
export function bytesOf(d: Data): Uint8Array {
  return typeof d === "string" ? utf8.encode(d) : d;
}

// The push parser of the broker refuses JSON nested deeper than
// encoding/json's 10000 levels, counted from the request body; message data
// sits a few levels down. Data nested deeper than this goes as data_b64.
const maxDataDepth = 9000;

/**
 * jsonText returns the bytes as text when they may travel as "data" — one
 * valid JSON value, valid UTF-8, with no whitespace before or after it (the
 * broker's own rule, IsJSONData) — and undefined when they must travel as
 * "data_b64".
 */
export function jsonText(b: Uint8Array): string | undefined {
  if (b.length === 0 || isSpace(b[0]!) || isSpace(b[b.length - 1]!)) {
    return undefined;
  }
  let text: string;
  try {
    text = strictUTF8.decode(b);
  } catch {
    return undefined; // not UTF-8
  }
  try {
    JSON.parse(text);
  } catch {
    return undefined; // not one JSON value
  }
  // Nesting n levels deep takes at least 2n characters.
  if (text.length > 2 * maxDataDepth && depth(text) > maxDataDepth) {
    return undefined;
  }
  return text;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

// depth returns the deepest nesting of arrays and objects in valid JSON.
function depth(text: string): number {
  let d = 0;
  let most = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      most = Math.max(most, ++d);
    } else if (c === 0x5d || c === 0x7d) {
      d--;
    }
  }
  return most;
}

/** dataField returns the JSON member that carries b: `"data":<b>` or `"data_b64":"<base64>"`. */
export function dataField(b: Uint8Array): string {
  const text = jsonText(b);
  if (text !== undefined) {
    return `"data":${text}`;
  }
  return `"data_b64":"${Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64")}"`;
}

const base64RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$/;

/** fromBase64 decodes standard base64 (padding optional) and refuses anything else. */
export function fromBase64(s: string): Uint8Array {
  if (!base64RE.test(s)) {
    throw new Error("data_b64: not standard base64");
  }
  const buf = Buffer.from(s, "base64");
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** The text of a "data" member, as parseReply leaves it. */
export type Raw = { readonly raw: string };

/** A value of a reply parsed by parseReply. */
export type Value = null | boolean | number | string | Value[] | { [k: string]: Value } | Raw;

/**
 * parseReply parses a reply body that lists messages (pop, dlq) like
 * JSON.parse, except that the "data" member of each object in an array of
 * the top-level object — each message — is {raw: <its text>}, cut out of
 * the body, instead of a parsed value.
 *
 * A JSON parser with source positions would do, but jsonc-parser's
 * recursion overflows the stack on messages nested some 9000 levels deep,
 * which the broker accepts (up to 10000); JSON.parse and this scanner are
 * iterative.
 */
export function parseReply(text: string): { [k: string]: Value } {
  const root: unknown = JSON.parse(text);
  if (root === null || typeof root !== "object" || Array.isArray(root)) {
    throw new Error("not a JSON object");
  }
  const spans = dataSpans(text);
  let next = 0;
  for (const v of Object.values(root as { [k: string]: unknown })) {
    if (!Array.isArray(v)) continue;
    for (const m of v as unknown[]) {
      if (m === null || typeof m !== "object" || Array.isArray(m) || !("data" in m)) continue;
      const span = spans[next++];
      if (span === undefined) throw new Error("data members out of step");
      (m as { data: Value }).data = { raw: text.slice(span[0], span[1]) };
    }
  }
  if (next !== spans.length) throw new Error("data members out of step");
  return root as { [k: string]: Value };
}

/**
 * dataSpans returns, in order, where the values of members named "data" at
 * nesting level 3 (top-level object, array, message object) start and end
 * in text, which must be valid JSON.
 */
export function dataSpans(text: string): [number, number][] {
  const spans: [number, number][] = [];
  let level = 0;
  for (let i = 0; i < text.length; ) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = stringEnd(text, i);
      if (level === 3) {
        const colon = skipSpace(text, end);
        if (text.charCodeAt(colon) === 0x3a && JSON.parse(text.slice(i, end)) === "data") {
          const start = skipSpace(text, colon + 1);
          const stop = valueEnd(text, start);
          spans.push([start, stop]);
          i = stop;
          continue;
        }
      }
      i = end;
      continue;
    }
    if (c === 0x7b || c === 0x5b) level++;
    else if (c === 0x7d || c === 0x5d) level--;
    i++;
  }
  return spans;
}

// stringEnd returns the index just past the string that starts at i.
function stringEnd(text: string, i: number): number {
  for (i++; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x22) return i + 1;
  }
  return text.length;
}

function skipSpace(text: string, i: number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  return i;
}

// valueEnd returns the index just past the JSON value that starts at i.
function valueEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return stringEnd(text, i);
  if (c !== 0x7b && c !== 0x5b) {
    while (i < text.length && !",}] \t\n\r".includes(text[i]!)) i++;
    return i;
  }
  let level = 0;
  while (i < text.length) {
    const d = text.charCodeAt(i);
    if (d === 0x22) {
      i = stringEnd(text, i);
      continue;
    }
    if (d === 0x7b || d === 0x5b) level++;
    else if (d === 0x7d || d === 0x5d) {
      if (--level === 0) return i + 1;
    }
    i++;
  }
  return i;
}

/**
 * messageBytes returns the bytes of a reply's message, from the raw text of
 * its "data" member or the base64 of its "data_b64".
 */
export function messageBytes(data: Value | undefined, dataB64: Value | undefined): Uint8Array {
  if (typeof dataB64 === "string") {
    return fromBase64(dataB64);
  }
  if (data !== null && typeof data === "object" && "raw" in data && typeof data.raw === "string") {
    return utf8.encode(data.raw);
  }
  throw new Error("neither data nor data_b64 in a message");
}
