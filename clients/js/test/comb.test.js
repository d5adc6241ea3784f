// The client against a real `comb serve`: every verb, the errors, message
// bytes and the consume loop. One broker serves the whole file.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { connect } from "@nats-io/transport-node";

import { Client, CombError, Delivery, DrainTimeoutError, isCombError, newConsumeStats, TransportError } from "@combmq/comb";

import { startBroker } from "./broker.js";

// Tenant A (alice, also who connects without credentials) has no limits;
// tenant B (bob) may push 2 messages a second and have 1 queue.
const config = `
accounts {
  A: { users: [ {user: alice, password: alice-secret} ] }
  B: { users: [ {user: bob, password: bob-secret} ] }
}
no_auth_user: alice
comb {
  tenant_limits {
    B { max_push_rate: 2, max_queues: 1 }
  }
}
`;

let broker;
let nc;
let comb;
const enc = new TextEncoder();
const text = (b) => new TextDecoder().decode(b);

before(async () => {
  broker = await startBroker({ config });
  nc = await connect({ servers: broker.url, maxReconnectAttempts: 0 });
  comb = new Client(nc);
});

after(async () => {
  await nc?.close();
  const how = await broker?.stop();
  assert.equal(how?.code, 0, `comb serve exited with ${JSON.stringify(how)}:\n${broker?.log()}`);
});

let queues = 0;
/** A queue name of its own for each test. */
const fresh = (name) => `js.${name}.${++queues}`;

async function rejects(p, code, messageRE) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof CombError, `want a CombError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (messageRE) assert.match(e.message, messageRE);
    return true;
  });
}

describe("verbs", () => {
  test("put, push, pop and ack as in the protocol's first session", async () => {
    const q = fresh("orders");
    const cfg = await comb.configure(q, { maxAttempts: 2, dedupWindowS: 3600 });
    assert.equal(cfg.maxAttempts, 2);
    assert.equal(cfg.dedupWindowS, 3600);
    assert.equal(cfg.leaseMs, 30000, "a field left out keeps its default");

    assert.deepEqual(await comb.put(q, '{"sku":42}', { partition: "eu" }), { partition: "eu", offset: 0, status: "stored" });
    assert.deepEqual(await comb.put(q, '{"sku":43}', { partition: "eu", id: "order-8" }), { partition: "eu", offset: 1, status: "stored" });
    assert.deepEqual(await comb.put(q, '{"sku":43}', { partition: "eu", id: "order-8" }), { partition: "eu", offset: 1, status: "duplicate" });
    const pushed = await comb.push(q, [
      { partition: "eu", id: "order-9", data: '{"sku":44}' },
      { data: Uint8Array.from([0, 1, 2]) },
    ]);
    assert.deepEqual(pushed, [
      { partition: "eu", offset: 2, status: "stored" },
      { partition: "default", offset: 0, status: "stored" },
    ]);

    const got = await comb.pop(q, { group: "billing", partition: "eu", max: 10 });
    assert.equal(got.length, 3);
    assert.ok(got[0] instanceof Delivery);
    assert.deepEqual(got.map((d) => [d.offset, d.id, d.attempt, d.text()]), [
      [0, "", 1, '{"sku":42}'],
      [1, "order-8", 1, '{"sku":43}'],
      [2, "order-9", 1, '{"sku":44}'],
    ]);
    assert.deepEqual(got[2].json(), { sku: 44 });
    assert.ok(got.every((d) => d.lease === got[0].lease && d.lease !== ""), "one lease");
    assert.ok(Math.abs(got[0].createdAt.getTime() - Date.now()) < 60_000, `createdAt ${got[0].createdAt}`);

    const other = await comb.pop(q, { group: "billing" });
    assert.deepEqual(other.map((d) => [d.partition, [...d.data]]), [["default", [0, 1, 2]]]);

    const t0 = Date.now();
    assert.deepEqual(await comb.pop(q, { group: "billing", waitMs: 300 }), [], "an empty pop is not an error");
    assert.ok(Date.now() - t0 >= 250, "the long poll waited");

    assert.deepEqual(await comb.ack(q, "billing", [{ partition: "eu", offset: 2, lease: got[0].lease, status: "completed" }]), [{ ok: true }]);
    const again = await comb.ack(q, "billing", [{ partition: "eu", offset: 2, lease: got[0].lease }]);
    assert.equal(again[0].ok, false);
    assert.match(again[0].error, /lease expired or not held by this group/);

    const info = await comb.info(q);
    assert.deepEqual(info.groups, [{ name: "billing", pending: 1, leased: 1 }]);

    // Header values of a put are UTF-8 names like any other.
    assert.equal((await comb.put(q, "x", { partition: "日本", id: "ïd" })).partition, "日本");
    const [jp] = await comb.pop(q, { group: "billing", partition: "日本" });
    assert.deepEqual([jp.partition, jp.id, jp.text()], ["日本", "ïd", "x"]);
  });

  test("headers travel with messages; delays hold a partition back", async () => {
    const q = fresh("headers");
    const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    await comb.push(q, [{ data: "1", headers: { traceparent: tp, "X-Tags": ["a", "b"] } }, { data: "2" }]);
    await comb.put(q, "3", { headers: { "X-Put": "p" } });
    const got = await comb.pop(q, { max: 10, autoAck: true });
    assert.deepEqual(got.map((d) => d.headers), [{ "X-Tags": ["a", "b"], traceparent: [tp] }, {}, { "X-Put": ["p"] }]);
    await assert.rejects(comb.push(q, [{ data: "x", headers: { "Comb-Id": "x" } }]), /names starting with "Comb-" are reserved/);

    const later = fresh("later");
    const t0 = Date.now();
    await comb.push(later, [{ data: "1", delayMs: 600 }, { data: "2" }]);
    await comb.put(later, "3", { partition: "p2", notBefore: new Date(Date.now() + 600) });
    const first = await comb.pop(later, { max: 10, partitions: 2, autoAck: true });
    if (Date.now() - t0 < 500) assert.deepEqual(first, [], "held back");
    const all = [...first];
    while (all.length < 3) {
      const more = await comb.pop(later, { max: 10, partitions: 2, autoAck: true, waitMs: 5000 });
      assert.ok(more.length > 0, "woken when the hold is past");
      all.push(...more);
    }
    assert.ok(Date.now() - t0 >= 500);
    assert.deepEqual(all.filter((d) => d.partition === "default").map((d) => d.text()), ["1", "2"]);
  });

  test("ackAndPop settles a batch and gets the next in one request", async () => {
    const q = fresh("acknext");
    await comb.push(q, [{ partition: "p", data: "1" }, { partition: "p", data: "2" }]);
    const [first] = await comb.pop(q, { group: "g", max: 1 });
    assert.equal(first.offset, 0);
    const next = await comb.ackAndPop(q, [
      { partition: "p", offset: 0, lease: first.lease },
      { partition: "p", offset: 0, lease: "l-1-0000000000000000" },
    ], { group: "g", max: 1 });
    assert.equal(next.acks.length, 2);
    assert.deepEqual(next.acks[0], { ok: true });
    assert.equal(next.acks[1].ok, false, "a wrong lease settles nothing and says so");
    assert.deepEqual(next.messages.map((d) => [d.offset, d.text()]), [[1, "2"]], "the ack freed p for the pop");
    const last = await comb.ackAndPop(q, [{ partition: "p", offset: 1, lease: next.messages[0].lease }], { group: "g", waitMs: 200 });
    assert.deepEqual(last, { messages: [], acks: [{ ok: true }] });
    assert.deepEqual(await comb.ackAndPop(q, [], { group: "g" }), { messages: [], acks: [] }, "without acks it is a pop");
  });

  test("renew extends a live lease and refuses a finished one", async () => {
    const q = fresh("renew");
    await comb.put(q, "1");
    const [d] = await comb.pop(q, { leaseMs: 1000 });
    const [r] = await comb.renew(q, [d.lease], 60_000);
    assert.equal(r.ok, true);
    assert.equal(r.lease, d.lease);
    assert.ok(r.expiresAt.getTime() > Date.now() + 50_000, `expiresAt ${r.expiresAt.toISOString()}`);
    assert.deepEqual(await comb.ack(q, undefined, [{ offset: d.offset, lease: d.lease }]), [{ ok: true }]);
    const [gone] = await comb.renew(q, [d.lease]);
    assert.equal(gone.ok, false);
    assert.match(gone.error, /lease/);
    assert.deepEqual(await comb.renew(q, []), [], "nothing to renew sends nothing");
  });

  test("dead letters: list, replay and purge", async () => {
    const q = fresh("dlq");
    await comb.configure(q, { maxAttempts: 2 });
    await comb.push(q, [{ data: Uint8Array.from([0, 1, 2]) }, { data: '{"n": 1}' }]);

    for (let attempt = 1; attempt <= 2; attempt++) {
      const ds = await comb.pop(q, { group: "g", max: 1 });
      assert.equal(ds[0].attempt, attempt);
      await comb.ack(q, "g", [{ offset: ds[0].offset, lease: ds[0].lease, status: "failed" }]);
    }
    const [second] = await comb.pop(q, { group: "g", max: 1 });
    assert.equal(second.offset, 1);
    await comb.ack(q, "g", [{ offset: 1, lease: second.lease, status: "dead" }]);

    const page = await comb.deadLetters(q, { group: "g" });
    assert.equal(page.next, "");
    assert.deepEqual(
      page.deadLetters.map((d) => [d.group, d.partition, d.offset, d.attempts, d.reason, [...d.data]]),
      [
        ["g", "default", 0, 2, "failed", [0, 1, 2]],
        ["g", "default", 1, 1, "dead", [...enc.encode('{"n": 1}')]],
      ],
    );
    assert.ok(page.deadLetters[0].deadAt instanceof Date && !Number.isNaN(page.deadLetters[0].deadAt.getTime()));

    const first = await comb.deadLetters(q, { limit: 1 });
    assert.equal(first.deadLetters.length, 1);
    assert.equal(first.next, first.deadLetters[0].dlqId);
    const rest = await comb.deadLetters(q, { limit: 1, after: first.next });
    assert.equal(rest.deadLetters[0].dlqId, page.deadLetters[1].dlqId);

    assert.equal(await comb.replay(q, [page.deadLetters[0].dlqId]), 1);
    assert.equal(await comb.replay(q, [page.deadLetters[0].dlqId]), 0, "an id no longer listed is skipped");
    const [replayed] = await comb.pop(q, { group: "g" });
    assert.deepEqual([replayed.offset, replayed.attempt, [...replayed.data]], [2, 1, [0, 1, 2]]);

    assert.equal(await comb.purge(q, [page.deadLetters[1].dlqId]), 1);
    assert.deepEqual((await comb.deadLetters(q)).deadLetters, []);
    await rejects(comb.purge(q, ["x-1"]), 400, /d-/);
  });

  test("seek moves a group to the start, the end or a time", async () => {
    const q = fresh("seek");
    await comb.push(q, [{ data: "1" }, { data: "2" }]);
    const ds = await comb.pop(q, { group: "g" });
    await comb.ack(q, "g", [{ offset: 1, lease: ds[0].lease }]);
    assert.deepEqual(await comb.pop(q, { group: "g" }), []);

    assert.equal(await comb.seek(q, { group: "g", to: "start" }), 1);
    const again = await comb.pop(q, { group: "g" });
    assert.deepEqual(again.map((d) => [d.offset, d.attempt]), [[0, 1], [1, 1]]);
    assert.equal(await comb.seek(q, { group: "g", partition: "default", to: "end" }), 1);
    assert.deepEqual(await comb.pop(q, { group: "g" }), []);

    await comb.seek(q, { group: "g", to: new Date(Date.now() - 3_600_000) });
    assert.equal((await comb.pop(q, { group: "g" })).length, 2, "a time an hour ago is before both");
    await rejects(comb.seek(q, { group: "g", to: "yesterday" }), 400, /to/);
  });

  test("info, list, delete, and configure merges", async () => {
    const q = fresh("admin");
    await comb.configure(q, { leaseMs: 5000 });
    const cfg = await comb.configure(q, { deadLetter: false });
    assert.equal(cfg.leaseMs, 5000, "merged, not reset");
    assert.equal(cfg.deadLetter, false);
    assert.deepEqual(await comb.configure(q), cfg, "an empty patch reads");

    await comb.push(q, [{ partition: "a", data: "12" }, { partition: "b", data: "345" }]);
    const info = await comb.info(q);
    assert.equal(info.name, q);
    assert.deepEqual(info.config, cfg);
    assert.equal(info.messages, 2);
    assert.equal(info.bytes, 5);
    assert.equal(info.deadLetters, 0);
    assert.deepEqual(info.partitions, [
      { name: "a", nextOffset: 1, lowOffset: 0 },
      { name: "b", nextOffset: 1, lowOffset: 0 },
    ]);
    assert.deepEqual(info.groups, []);
    assert.ok(info.createdAt instanceof Date);
    assert.equal(info.partitionCount, 2);
    assert.equal(info.next, "");

    // One partition a page: the first page says where the second starts.
    const first = await comb.infoPage(q, { limit: 1 });
    assert.deepEqual(first.partitions.map((p) => p.name), ["a"]);
    assert.equal(first.partitionCount, 2);
    assert.notEqual(first.next, "");
    const second = await comb.infoPage(q, { limit: 1, after: first.next });
    assert.deepEqual(second.partitions.map((p) => p.name), ["b"]);
    assert.equal(second.messages, 2, "every page carries the whole queue's figures");
    const onePerPage = [];
    for (let page = await comb.listPage({ limit: 1 }); ; page = await comb.listPage({ limit: 1, after: page.next })) {
      assert.ok(page.queues.length <= 1);
      onePerPage.push(...page.queues.map((s) => s.name));
      if (page.next === "") break;
    }
    assert.deepEqual(onePerPage, (await comb.list()).map((s) => s.name), "list reads every page");
    assert.ok(onePerPage.includes(q));

    const line = (await comb.list()).find((s) => s.name === q);
    assert.deepEqual(line, { name: q, partitions: 2, messages: 2, bytes: 5, groups: 0, pending: 0 });

    await comb.delete(q);
    assert.equal((await comb.list()).find((s) => s.name === q), undefined);
    await rejects(comb.info(q), 404, /not found/);
  });
});

describe("errors", () => {
  test("404: a queue that does not exist", async () => {
    const q = fresh("missing");
    for (const call of [() => comb.info(q), () => comb.delete(q), () => comb.pop(q), () => comb.ack(q, "g", [{ offset: 0, lease: "l-1-00" }]), () => comb.deadLetters(q)]) {
      await assert.rejects(call, (e) => {
        assert.ok(isCombError(e, 404), String(e));
        assert.equal(e.message, `queue "${q}": not found`);
        assert.equal(e.retryAfterMs, undefined);
        assert.equal(e.temporary, false);
        assert.match(String(e), /^CombError: comb: \w+ js\.missing\.\d+: queue .* not found \(404\)$/);
        return true;
      });
    }
  });

  test("400 carries the service's message", async () => {
    const q = fresh("bad");
    await rejects(comb.configure(q, { leaseMs: 10 }), 400, /^lease_ms: 10 is out of range 100\.\.86400000$/);
    await rejects(comb.push(q, [{ partition: "a\u0001b", data: "1" }]), 400, /messages\[0\]\.partition/);
    await rejects(comb.put("bad$name", "1"), 400, /queue name "bad\$name" has character '\$' at byte 3/);
    await comb.put(q, "1");
    const [d] = await comb.pop(q);
    await rejects(comb.ack(q, undefined, [{ offset: d.offset, lease: d.lease, status: "done" }]), 400, /unknown status "done"/);
    await rejects(comb.pop(q, { max: 20000 }), 400, /max/);
  });

  test("400 from the client itself: requests it will not send", async () => {
    await rejects(comb.info(""), 400, /empty queue name/);
    await rejects(comb.put("a b", "1"), 400, /bad queue name/);
    await rejects(comb.pop("a.>"), 400, /bad queue name/);
    await rejects(comb.configure(fresh("typo"), { maxAttemps: 2 }), 400, /unknown setting "maxAttemps"/);
  });

  test("413 and 429 of a queue's limits", async () => {
    const q = fresh("limits");
    await comb.configure(q, { maxMessageBytes: 8, maxMessages: 1 });
    await rejects(comb.put(q, "0123456789abcdef"), 413, /max_message_bytes of 8/);
    await comb.put(q, "1");
    await assert.rejects(comb.put(q, "2"), (e) => {
      assert.ok(isCombError(e, 429), String(e));
      assert.match(e.message, /limit reached/);
      assert.equal(e.temporary, true);
      return true;
    });
  });

  test("429 of a tenant's quota says when to retry", async () => {
    const bobConn = await connect({ servers: broker.url, user: "bob", pass: "bob-secret", maxReconnectAttempts: 0 });
    try {
      const bob = new Client(bobConn);
      // Six at once against a bucket of two: most are refused.
      const outcomes = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => bob.put("orders", String(i))));
      const errs = outcomes.filter((o) => o.status === "rejected").map((o) => o.reason);
      assert.ok(errs.length >= 3 && errs.every((e) => isCombError(e, 429)), `want 429s, got ${errs}`);
      const refused = errs.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
      assert.match(refused.message, /push rate of 2 messages per second/);
      assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 1000, `retryAfterMs ${refused.retryAfterMs}`);
      await new Promise((r) => setTimeout(r, refused.retryAfterMs + 20));
      assert.equal((await bob.put("orders", "later")).status, "stored", "the same request succeeds after retryAfterMs");

      await assert.rejects(bob.configure("audit"), (e) => isCombError(e, 429) && /max_queues is 1/.test(e.message) && e.retryAfterMs > 0);
      assert.deepEqual((await bob.list()).map((s) => s.name), ["orders"], "bob sees only his tenant's queues");
      assert.equal((await comb.list()).find((s) => s.name === "orders"), undefined, "and alice not his");
    } finally {
      await bobConn.close();
    }
  });

  test("no responders and timeouts are TransportErrors", async () => {
    await assert.rejects(new Client(nc, { prefix: "nobody" }).info("q"), (e) => {
      assert.ok(e instanceof TransportError, String(e));
      assert.equal(e.kind, "noResponders");
      assert.match(e.message, /no Comb service listens on nobody\.info\.q/);
      return true;
    });
    const silent = nc.subscribe("silent.>"); // takes requests, never answers
    try {
      await assert.rejects(new Client(nc, { prefix: "silent", timeoutMs: 200 }).list(), (e) => e instanceof TransportError && e.kind === "timeout");
    } finally {
      silent.unsubscribe();
    }
  });
});

describe("message bytes", () => {
  const cases = [
    ['{"sku":42}', "data"],
    ['{"sku": 42}', "data"],
    ['{"b":1,"a":2,"1":3}', "data"],
    ["1.50", "data"],
    ["1e2", "data"],
    ['"\\ud800"', "data"],
    ['{"a":"<b>&\\u2028", "raw":"\u2028"}', "data"],
    ["null", "data"],
    [" 42", "data_b64"],
    ['{"sku":42}\n', "data_b64"],
    ["plain text", "data_b64"],
    ["", "data_b64"],
    ["\ufeff42", "data_b64"],
    [Uint8Array.from([0x22, 0xff, 0x22]), "data_b64"],
    [Uint8Array.from([0, 1, 2, 255]), "data_b64"],
  ];
  const asBytes = (c) => (typeof c === "string" ? enc.encode(c) : c);

  test("push and put round-trip every case, and the broker picks the same field", async () => {
    const q = fresh("bytes");
    await comb.push(q, cases.map(([c]) => ({ partition: "push", data: c })));
    for (const [c] of cases) await comb.put(q, c, { partition: "put" });

    for (const partition of ["push", "put"]) {
      // The raw reply shows the field the broker chose.
      const raw = text((await nc.request(`comb.pop.${q}`, JSON.stringify({ group: "raw", partition, max: 100, auto_ack: true }), { timeout: 10_000 })).data);
      const fields = [...raw.matchAll(/"(data|data_b64)":/g)].map((m) => m[1]);
      assert.deepEqual(fields, cases.map(([, f]) => f), raw);

      const got = await comb.pop(q, { group: "client", partition, max: 100 });
      assert.equal(got.length, cases.length);
      got.forEach((d, i) => assert.deepEqual(d.data, asBytes(cases[i][0]), `${partition} case ${i}: ${JSON.stringify(String(cases[i][0]))}`));
    }
  });

  test("a message nested 9500 levels deep travels as data_b64 and comes back as data", async () => {
    const q = fresh("deep");
    const deep = "[".repeat(9500) + "]".repeat(9500);
    await comb.push(q, [{ data: deep }]);
    const [d] = await comb.pop(q);
    assert.equal(d.text(), deep);
  });

  test("dead letters keep the bytes too", async () => {
    const q = fresh("dlqbytes");
    await comb.push(q, cases.map(([c]) => ({ data: c })));
    const ds = await comb.pop(q, { max: 100 });
    const acks = ds.map((d) => ({ offset: d.offset, lease: d.lease, status: "dead" }));
    assert.ok((await comb.ack(q, undefined, acks)).every((r) => r.ok));
    const page = await comb.deadLetters(q);
    assert.equal(page.deadLetters.length, cases.length);
    page.deadLetters.forEach((d, i) => assert.deepEqual(d.data, asBytes(cases[i][0]), `case ${i}`));
  });
});

describe("consume", () => {
  const timeout = (ms, what) =>
    new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms).unref());

  test("N messages over several partitions are each handled once, acked, and the loop stops cleanly", async () => {
    const q = fresh("consume");
    const n = 400;
    const msgs = Array.from({ length: n }, (_, i) => ({ partition: `p${i % 4}`, data: JSON.stringify({ i }) }));
    for (let i = 0; i < n; i += 100) await comb.push(q, msgs.slice(i, i + 100));

    const seen = new Map();
    const stop = new AbortController();
    const stats = newConsumeStats();
    const ackErrors = [];
    let allSeen;
    const done = new Promise((r) => (allSeen = r));
    const lastOffset = new Map();
    const consuming = comb.consume(
      q,
      (d) => {
        const { i } = d.json();
        seen.set(i, (seen.get(i) ?? 0) + 1);
        assert.ok((lastOffset.get(d.partition) ?? -1) < d.offset, "offset order within a partition");
        lastOffset.set(d.partition, d.offset);
        if (seen.size === n) allSeen();
      },
      { signal: stop.signal, group: "workers", max: 25, concurrency: 3, waitMs: 500, stats, onAckError: (e) => ackErrors.push(e) },
    );
    await Promise.race([done, timeout(60_000, `${seen.size} of ${n} seen`)]);
    stop.abort();
    await consuming;

    assert.equal(seen.size, n);
    assert.ok([...seen.values()].every((c) => c === 1), "each message handled once");
    assert.deepEqual(ackErrors, []);
    assert.equal(stats.popped, n);
    assert.equal(stats.completed, n);
    assert.equal(stats.handlerErrors + stats.failed + stats.retried + stats.dead + stats.popErrors, 0);
    const info = await comb.info(q);
    assert.deepEqual(info.groups, [{ name: "workers", pending: 0, leased: 0 }], "every ack landed before consume returned");
  });

  test("statuses: retry, failed (a throw), dead, and the rest of the lease after a retry", async () => {
    const q = fresh("statuses");
    await comb.configure(q, { maxAttempts: 3 });
    await comb.push(q, ["ok", "retry-once", "throw-once", "dead", "ok2"].map((s) => ({ data: s })));

    const calls = [];
    const stop = new AbortController();
    const stats = newConsumeStats();
    const handlerErrors = [];
    const tried = new Set();
    const consuming = comb.consume(
      q,
      (d) => {
        const s = d.text();
        calls.push(`${s}@${d.attempt}`);
        if (s === "retry-once" && !tried.has(s)) {
          tried.add(s);
          return "retry";
        }
        if (s === "throw-once" && !tried.has(s)) {
          tried.add(s);
          throw new Error("boom");
        }
        if (s === "dead") return "dead";
        if (s === "ok2") stop.abort();
        return undefined;
      },
      { signal: stop.signal, stats, waitMs: 200, onHandlerError: (e, d) => handlerErrors.push(`${e.message}@${d.offset}`) },
    );
    await Promise.race([consuming, timeout(30_000, calls.join(" "))]);

    assert.deepEqual(calls, [
      "ok@1",
      "retry-once@1", // the rest of the lease is not handed to the handler...
      "retry-once@1", // ...but delivered again, without an attempt spent
      "throw-once@1",
      "throw-once@2", // failed spends one; attempt is the lease's, so the
      "dead@2", // messages redelivered with it show 2 as well
      "ok2@2",
    ]);
    assert.deepEqual(handlerErrors, ["boom@2"]);
    assert.deepEqual(
      { completed: stats.completed, retried: stats.retried, failed: stats.failed, dead: stats.dead, handlerErrors: stats.handlerErrors },
      { completed: 4, retried: 1, failed: 1, dead: 1, handlerErrors: 1 },
    );
    const dl = (await comb.deadLetters(q)).deadLetters;
    assert.deepEqual(dl.map((d) => [text(d.data), d.reason]), [["dead", "dead"]]);
    assert.deepEqual((await comb.info(q)).groups, [{ name: "default", pending: 0, leased: 0 }]);
  });

  test("acks in flight never exceed ackInflight", async () => {
    const q = fresh("bound");
    await comb.push(q, Array.from({ length: 60 }, (_, i) => ({ partition: `p${i % 6}`, data: String(i) })));
    // A client whose acks take 100 ms longer: the loops outrun them.
    let inFlight = 0;
    let most = 0;
    class SlowAcks extends Client {
      async ack(...args) {
        most = Math.max(most, ++inFlight);
        try {
          await new Promise((r) => setTimeout(r, 100));
          return await super.ack(...args);
        } finally {
          inFlight--;
        }
      }
    }
    const slow = new SlowAcks(nc);
    const stop = new AbortController();
    const stats = newConsumeStats();
    let handled = 0;
    const consuming = slow.consume(q, () => {
      if (++handled === 60) stop.abort();
    }, { signal: stop.signal, max: 2, concurrency: 6, ackInflight: 2, waitMs: 200, stats });
    await Promise.race([consuming, timeout(30_000, `${handled} handled`)]);
    assert.equal(handled, 60);
    assert.equal(most, 2, "the bound was reached and held");
    assert.equal(stats.completed, 60, "every ack was sent: none dropped at the bound");
  });

  test("stopping: while long-polling, and mid-batch with the rest given back", async () => {
    const q = fresh("stop");
    await comb.configure(q);
    const idle = new AbortController();
    const t0 = Date.now();
    const idling = comb.consume(q, () => {}, { signal: idle.signal, waitMs: 10_000 });
    setTimeout(() => idle.abort(), 200);
    await idling;
    assert.ok(Date.now() - t0 < 3_000, `stopped after ${Date.now() - t0} ms, not at the end of the 10 s poll`);

    await comb.push(q, Array.from({ length: 10 }, (_, i) => ({ data: String(i) })));
    const stop = new AbortController();
    const stats = newConsumeStats();
    const handled = [];
    await comb.consume(q, (d) => {
      handled.push(d.offset);
      if (d.offset === 2) stop.abort();
    }, { signal: stop.signal, group: "g", stats, max: 10 });
    assert.deepEqual(handled, [0, 1, 2], "no message handed to the handler after the abort");
    assert.equal(stats.completed, 3);
    const rest = await comb.pop(q, { group: "g", max: 10 });
    assert.deepEqual(rest.map((d) => [d.offset, d.attempt]), [3, 4, 5, 6, 7, 8, 9].map((o) => [o, 1]), "ready again at once, no attempt spent");
  });

  test("a 400 stops the loop and rejects; acks still unanswered make DrainTimeoutError", async () => {
    const q = fresh("fatal");
    await comb.configure(q);
    await rejects(comb.consume(q, () => {}, { group: "bad\u0001group" }), 400, /group/);

    await comb.put(q, "1");
    class NeverAcks extends Client {
      ack() {
        return new Promise(() => {});
      }
    }
    const stop = new AbortController();
    const consuming = new NeverAcks(nc).consume(q, () => stop.abort(), { signal: stop.signal, drainTimeoutMs: 100 });
    await assert.rejects(consuming, (e) => e instanceof DrainTimeoutError && e.inFlight === 1);
  });
});
