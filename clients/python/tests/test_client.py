"""Every verb of the client against a real broker, and its errors."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

import comb
from comb import _nats
from conftest import TOKEN, USERS
from test_wire import AS_B64, AS_DATA


async def test_push_pop_ack(client, queue):
    res = await client.push(queue, [comb.Message(b'{"sku":42}', partition="eu", id="o-1"),
                                    comb.Message(b"\x00\x01\x02", partition="eu"), b"bare bytes"])
    assert [(r.partition, r.offset, r.status) for r in res] == [
        ("eu", 0, comb.STATUS_STORED), ("eu", 1, comb.STATUS_STORED), ("default", 0, comb.STATUS_STORED)]
    batch = await client.pop(queue, group="billing", partition="eu", max=10)
    assert [(d.offset, d.data, d.id, d.attempt) for d in batch] == [(0, b'{"sku":42}', "o-1", 1),
                                                                   (1, b"\x00\x01\x02", "", 1)]
    assert batch[0].lease and batch[0].lease == batch[1].lease
    assert batch[0].created_at is not None and abs(datetime.now(timezone.utc) - batch[0].created_at) < timedelta(minutes=5)
    results = await client.ack(queue, [comb.Ack.of(batch[-1])], group="billing")
    assert results == [comb.AckResult(ok=True)]
    again = await client.ack(queue, [comb.Ack.of(batch[-1])], group="billing")
    assert not again[0].ok and "lease" in again[0].error
    info = await client.info(queue)
    assert info.group("billing").pending == 1  # the default partition's message


async def test_ack_and_pop(client, queue):
    await client.push(queue, [comb.Message(b"1", partition="p"), comb.Message(b"2", partition="p")])
    [first] = await client.pop(queue, group="g", max=1)
    wrong = comb.Ack(partition="p", offset=0, lease="l-1-0000000000000000")
    batch, results = await client.ack_and_pop(queue, [comb.Ack.of(first), wrong], group="g", max=1)
    assert results[0] == comb.AckResult(ok=True)
    assert not results[1].ok and "lease" in results[1].error  # settles nothing, says so, the pop goes on
    assert [(d.offset, d.data) for d in batch] == [(1, b"2")]  # the ack freed p for the pop
    batch, results = await client.ack_and_pop(queue, [comb.Ack.of(batch[0])], group="g", wait=0.2)
    assert (batch, results) == ([], [comb.AckResult(ok=True)])
    assert await client.ack_and_pop(queue, [], group="g") == ([], [])  # without acks it is a pop


async def test_put_headers_and_dedup(client, queue):
    await client.configure(queue, dedup_window_s=3600)
    first = await client.put(queue, b'{"sku":43}', partition="eu", id="order-8")
    dup = await client.put(queue, b'{"sku":43}', partition="eu", id="order-8")
    assert (first.offset, first.status) == (0, comb.STATUS_STORED)
    assert (dup.offset, dup.status) == (0, comb.STATUS_DUPLICATE)
    [d] = await client.pop(queue, partition="eu", auto_ack=True)
    assert (d.id, d.lease, d.data) == ("order-8", "", b'{"sku":43}')


async def test_headers_and_delays(client, queue):
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await client.push(queue, [comb.Message(b"1", headers={"traceparent": tp, "X-Tags": ["a", "b"]}), comb.Message(b"2")])
    await client.put(queue, b"3", headers={"X-Put": "p"})
    got = await client.pop(queue, max=10, auto_ack=True)
    assert [d.headers for d in got] == [{"X-Tags": ["a", "b"], "traceparent": [tp]}, {}, {"X-Put": ["p"]}]
    with pytest.raises(comb.CombError, match='names starting with "Comb-" are reserved'):
        await client.push(queue, [comb.Message(b"x", headers={"Comb-Id": "x"})])

    later = queue + ".later"
    t0 = asyncio.get_running_loop().time()
    await client.push(later, [comb.Message(b"1", delay=0.6), comb.Message(b"2")])
    await client.put(later, b"3", partition="p2", not_before=datetime.now(timezone.utc) + timedelta(seconds=0.6))
    first = await client.pop(later, max=10, partitions=2, auto_ack=True)
    if asyncio.get_running_loop().time() - t0 < 0.5:
        assert first == [], "held back"
    got = list(first)
    while len(got) < 3:
        more = await client.pop(later, max=10, partitions=2, auto_ack=True, wait=5)
        assert more, "woken when the hold is past"
        got += more
    assert asyncio.get_running_loop().time() - t0 >= 0.5
    assert [d.data for d in got if d.partition == "default"] == [b"1", b"2"]


@pytest.mark.parametrize("verb", ["push", "put"])
async def test_bytes_round_trip(client, queue, verb):
    cases = AS_DATA + AS_B64
    if verb == "push":
        await client.push(queue, [comb.Message(b, partition="p") for b in cases])
    else:
        for b in cases:
            await client.put(queue, b, partition="p")
    got = await client.pop(queue, partition="p", max=len(cases), auto_ack=True)
    assert [d.data for d in got] == cases


async def test_pop_waits_and_returns_empty(client, queue):
    await client.configure(queue)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await client.pop(queue, wait=0.3) == []
    assert loop.time() - t0 >= 0.25


async def test_renew_failed_dead_letters_replay_purge(client, queue):
    cfg = await client.configure(queue, max_attempts=2, lease_ms=60000)
    assert (cfg.max_attempts, cfg.lease_ms, cfg.dead_letter) == (2, 60000, True)
    await client.push(queue, [b"a", b"b"])
    [d] = await client.pop(queue, max=1)
    [r] = await client.renew(queue, [d.lease], lease=120)
    assert r.ok and r.expires_at > datetime.now(timezone.utc) + timedelta(seconds=90)
    [bad] = await client.renew(queue, ["l-1-0000000000000000"])
    assert not bad.ok and bad.error
    for attempt in (1, 2):
        if attempt > 1:
            [d] = await client.pop(queue, max=1)
        assert (d.data, d.attempt) == (b"a", attempt)
        assert (await client.ack(queue, [comb.Ack.of(d, comb.ACK_FAILED)]))[0].ok
    [d2] = await client.pop(queue, max=1)
    assert (await client.ack(queue, [comb.Ack.of(d2, comb.ACK_DEAD)]))[0].ok

    letters, nxt = await client.dead_letters(queue)
    assert [(x.data, x.reason, x.attempts, x.group) for x in letters] == [(b"a", "failed", 2, "default"),
                                                                         (b"b", "dead", 1, "default")]
    assert nxt == ""
    page, nxt = await client.dead_letters(queue, limit=1)
    assert len(page) == 1 and nxt == page[0].dlq_id
    page2, _ = await client.dead_letters(queue, limit=1, after=nxt)
    assert page2[0].dlq_id == letters[1].dlq_id
    assert await client.replay(queue, [letters[0].dlq_id]) == 1
    assert await client.purge(queue, [letters[1].dlq_id, letters[0].dlq_id]) == 1  # the replayed one is gone
    assert (await client.dead_letters(queue))[0] == []
    [again] = await client.pop(queue, auto_ack=True)
    assert (again.data, again.attempt) == (b"a", 1)


async def test_seek_list_delete(client, queue):
    await client.push(queue, [comb.Message(b"1", partition="eu"), comb.Message(b"2", partition="us")])
    assert len(await client.pop(queue, group="g", partitions=2, auto_ack=True)) == 2
    assert (await client.info(queue)).group("g").pending == 0
    assert await client.seek(queue, comb.SEEK_START, group="g", partition="eu") == 1
    assert (await client.info(queue)).group("g").pending == 1
    assert await client.seek(queue, datetime.now(timezone.utc) - timedelta(hours=1), group="g") == 2
    assert (await client.info(queue)).group("g").pending == 2
    assert await client.seek(queue, comb.SEEK_END, group="g") == 2

    listed = {q.name: q for q in await client.list()}
    assert listed[queue].partitions == 2 and listed[queue].messages == 2
    info = await client.info(queue)
    assert sorted((p.name, p.next_offset) for p in info.partitions) == [("eu", 1), ("us", 1)]
    assert info.partition_count == 2 and info.next == ""

    # One partition a page: the first page says where the second starts.
    first = await client.info_page(queue, limit=1)
    assert [p.name for p in first.partitions] == ["eu"] and first.next
    second = await client.info_page(queue, limit=1, after=first.next)
    assert [p.name for p in second.partitions] == ["us"] and second.messages == 2
    names, after = [], ""
    while True:
        page, after = await client.list_page(limit=1, after=after)
        assert len(page) <= 1
        names += [q.name for q in page]
        if not after:
            break
    assert names == [q.name for q in await client.list()] and queue in names
    await client.delete(queue)
    assert queue not in {q.name for q in await client.list()}
    with pytest.raises(comb.NotFound):
        await client.delete(queue)


async def test_pop_from_new(client, queue):
    await client.put(queue, b"old")
    assert await client.pop(queue, group="late", from_=comb.FROM_NEW) == []
    await client.put(queue, b"new")
    [d] = await client.pop(queue, group="late", auto_ack=True)
    assert d.data == b"new"


async def test_errors(client, queue):
    with pytest.raises(comb.NotFound) as e:
        await client.info(queue)
    assert e.value.code == 404 and e.value.message == f'queue "{queue}": not found'
    assert str(e.value) == f'comb: info {queue}: queue "{queue}": not found (404)'
    assert not e.value.temporary and e.value.retry_after_ms is None

    with pytest.raises(comb.BadRequest) as e:
        await client.configure(queue, lease_ms=10)
    assert e.value.code == 400 and "lease_ms" in e.value.message

    await client.put(queue, b"x")
    [d] = await client.pop(queue)
    with pytest.raises(comb.BadRequest) as e:
        await client.ack(queue, [comb.Ack.of(d, "done")])
    assert 'unknown status "done"' in e.value.message

    with pytest.raises(comb.BadRequest) as e:
        await client.info("bad$name")
    assert "'$'" in e.value.message

    for bad in ["", "a b", "a.*", "a.>", ".a", "a.", "a..b"]:  # refused before sending
        with pytest.raises(comb.BadRequest):
            await client.pop(bad)
    with pytest.raises(comb.BadRequest):
        await client.configure(queue, max_attemps=3)

    await client.configure(queue, max_message_bytes=8)
    with pytest.raises(comb.TooLarge) as e:
        await client.put(queue, b"0123456789")
    assert e.value.code == 413


async def test_no_responders_and_timeout(plain, client, queue):
    other = comb.Client(client.nc, prefix="nobody")
    with pytest.raises(comb.NoRespondersError):
        await other.info(queue)

    # A responder that never answers: the client's own timeout.
    sub = await client.nc.subscribe("silent.info.>", cb=lambda m: asyncio.sleep(0))
    try:
        await client.nc.flush()
        slow = comb.Client(client.nc, prefix="silent", timeout=0.2)
        with pytest.raises(comb.RequestTimeoutError):
            await slow.info(queue)
        with pytest.raises(TimeoutError):
            await slow.info(queue)
    finally:
        await sub.unsubscribe()


async def test_over_max_payload_is_refused_before_sending(client, queue):
    with pytest.raises(ValueError, match="max_payload"):
        await client.put(queue, b"x" * (client.nc.max_payload + 1))
    assert (await client.put(queue, b"still connected")).offset == 0


async def test_token_auth(plain, queue):
    with pytest.raises(comb.NatsError, match="(?i)authorization"):
        await comb.connect(plain.url, token="wrong")
    with pytest.raises(comb.NatsError, match="(?i)authorization"):
        await comb.connect(plain.url)
    c = await comb.connect(f"nats://{TOKEN}@{plain.host}:{plain.port}")  # the token in the URL
    async with c:
        assert (await c.put(queue, b"1")).status == comb.STATUS_STORED


async def test_tls_users_and_tenants(secure, queue):
    tls = secure.tls_context()
    alice = await comb.connect(secure.url, user="alice", password=USERS["alice"], tls=tls)
    bob = await comb.connect(f"tls://bob:{USERS['bob']}@{secure.host}:{secure.port}", tls=tls)
    async with alice, bob:
        await alice.put(queue, b'"for A"')
        await bob.put(queue, b'"for B"')
        [d] = await bob.pop(queue, auto_ack=True)
        assert d.data == b'"for B"'
        assert [q.name for q in await alice.list()] == [queue]

    with pytest.raises(comb.NatsError, match="(?i)authorization"):
        await comb.connect(secure.url, user="alice", password="wrong", tls=tls)
    with pytest.raises(comb.NatsError, match="requires TLS"):
        await comb.connect(secure.url, user="alice", password=USERS["alice"])
    with pytest.raises(comb.NatsError, match="(?i)certificate"):
        await comb.connect(secure.url, user="alice", password=USERS["alice"], tls=__import__("ssl").create_default_context())


async def test_tenant_quota_is_429_with_retry_after(secure, queue):
    bob = await comb.connect(secure.url, user="bob", password=USERS["bob"], tls=secure.tls_context())
    async with bob:
        err = None
        for i in range(10):  # max_push_rate 2: the bucket holds two
            try:
                await bob.put(queue, b"%d" % i)
            except comb.LimitReached as e:
                err = e
                break
        assert err is not None, "no 429 after 10 puts at a rate of 2 per second"
        assert err.code == 429 and err.temporary
        assert err.retry_after_ms is not None and 0 < err.retry_after_ms <= 1000
        assert "push rate" in err.message
        await asyncio.sleep(err.retry_after_ms / 1000 + 0.05)
        assert (await bob.put(queue, b"after")).status == comb.STATUS_STORED


async def test_builtin_connection_closes_cleanly(plain, queue):
    nc = await _nats.connect(plain.url, token=TOKEN)
    c = comb.Client(nc)
    pending = asyncio.ensure_future(c.pop(queue, wait=30))
    await c.put(queue + "-x", b"1")
    await nc.close()
    with pytest.raises((comb.ConnectionClosedError, comb.NotFound)):
        await pending
    with pytest.raises(comb.ConnectionClosedError):
        await c.info(queue)
