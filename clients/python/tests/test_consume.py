"""The consume loop against a real broker."""

from __future__ import annotations

import asyncio
import collections

import pytest

import comb


async def test_n_messages_exactly_once(client, queue):
    n = 300
    await client.push(queue, [comb.Message(b'{"n":%d}' % i, partition=f"p{i % 5}") for i in range(n)])
    seen: collections.Counter = collections.Counter()
    stop = asyncio.Event()
    stats = comb.ConsumeStats()
    errors: list[BaseException] = []

    async def handler(batch):
        for d in batch:
            seen[(d.partition, d.offset)] += 1
        if sum(seen.values()) >= n:
            stop.set()

    await asyncio.wait_for(client.consume(queue, handler, stop=stop, group="workers", max=17, concurrency=3,
                                          wait=1, stats=stats, on_ack_error=errors.append), 60)
    assert errors == []
    assert len(seen) == n and set(seen.values()) == {1}
    assert (stats.popped, stats.acked, stats.nacked, stats.ack_errors) == (n, n, 0, 0)
    info = await client.info(queue)
    assert info.group("workers").pending == 0 and info.group("workers").leased == 0


async def test_handler_error_fails_the_batch_until_dead_letter(client, queue):
    await client.configure(queue, max_attempts=2)
    await client.put(queue, b"poison")
    attempts = []
    stop = asyncio.Event()
    stats = comb.ConsumeStats()

    async def handler(batch):
        attempts.append(batch[0].attempt)
        if len(attempts) == 2:
            asyncio.get_running_loop().call_later(0.3, stop.set)
        raise RuntimeError("cannot handle it")

    await asyncio.wait_for(client.consume(queue, handler, stop=stop, wait=0.2, stats=stats), 30)
    assert attempts == [1, 2]
    assert (stats.handler_errors, stats.nacked) == (2, 2)
    letters, _ = await client.dead_letters(queue)
    assert [(d.data, d.reason, d.attempts) for d in letters] == [(b"poison", "failed", 2)]


async def test_stop_ends_a_long_poll_at_once(client, queue):
    await client.configure(queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, stop.set)
    t0 = loop.time()

    async def handler(batch):
        raise AssertionError("nothing to consume")

    await asyncio.wait_for(client.consume(queue, handler, stop=stop, wait=30), 10)
    assert loop.time() - t0 < 5


async def test_stop_during_the_handler_still_acks(client, queue):
    await client.push(queue, [b"1", b"2", b"3"])
    stop = asyncio.Event()
    stats = comb.ConsumeStats()

    async def handler(batch):
        stop.set()
        await asyncio.sleep(0.1)  # the handler finishes its batch after the stop

    await asyncio.wait_for(client.consume(queue, handler, stop=stop, stats=stats), 10)
    assert stats.acked == 3
    assert (await client.info(queue)).group("default").pending == 0


async def test_cancel_drains_acks_and_reraises(client, queue):
    await client.push(queue, [b"a"] * 5)
    handled = asyncio.Event()
    stats = comb.ConsumeStats()

    async def handler(batch):
        handled.set()

    task = asyncio.ensure_future(client.consume(queue, handler, stats=stats, wait=30))
    await asyncio.wait_for(handled.wait(), 10)
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stats.acked == 5
    assert (await client.info(queue)).group("default").pending == 0


async def test_bad_request_stops_consume(client, queue):
    await client.configure(queue)

    async def handler(batch):
        pass

    with pytest.raises(comb.BadRequest):
        await asyncio.wait_for(client.consume(queue, handler, group="bad\x01group"), 10)
    with pytest.raises(comb.BadRequest):
        await client.consume("bad queue", handler)


async def test_pop_errors_back_off_and_retry(client, queue):
    # The queue does not exist yet: pops are 404s, retried until it does.
    got = asyncio.Event()
    stop = asyncio.Event()
    pop_errors: list[BaseException] = []

    async def handler(batch):
        got.set()
        stop.set()

    task = asyncio.ensure_future(client.consume(queue, handler, stop=stop, wait=0.1, on_pop_error=pop_errors.append))
    while len(pop_errors) < 2:
        await asyncio.sleep(0.05)
    await client.put(queue, b"late")
    await asyncio.wait_for(task, 10)
    assert got.is_set()
    assert all(isinstance(e, comb.NotFound) for e in pop_errors), pop_errors


class CountingClient(comb.Client):
    """A client that records how many acks are in flight at once."""

    def __init__(self, nc):
        super().__init__(nc)
        self.inflight = 0
        self.peak = 0

    async def ack(self, queue, acks, *, group=""):
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            await asyncio.sleep(0.02)  # slow acks, so that they pile up if unbounded
            return await super().ack(queue, acks, group=group)
        finally:
            self.inflight -= 1


@pytest.mark.parametrize("bound", [1, 3])
async def test_acks_in_flight_are_bounded(client, queue, bound):
    n = 40
    await client.push(queue, [comb.Message(b"%d" % i, partition=f"p{i}") for i in range(n)])
    counting = CountingClient(client.nc)
    stop = asyncio.Event()
    stats = comb.ConsumeStats()

    async def handler(batch):
        if stats.popped >= n:
            stop.set()

    await asyncio.wait_for(counting.consume(queue, handler, stop=stop, ack_inflight=bound, concurrency=4,
                                            wait=0.5, stats=stats), 60)
    assert stats.acked == n
    assert counting.peak == bound
