"""The consume loop: long-polling pops, a handler per batch, bounded asynchronous acks.

The semantics are those of clients/go's Consume.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Optional, Union

from .errors import AckRefused, BadRequest, CombError, DrainTimeoutError, NoRespondersError
from .types import ACK_COMPLETED, ACK_FAILED, ACK_RETRY, Ack, Delivery

if TYPE_CHECKING:
    from .client import Client

DEFAULT_ACK_INFLIGHT = 256
DEFAULT_CONSUME_WAIT = 5.0

# Backoff bounds of a failing pop loop, in seconds.
POP_BACKOFF_MIN = 0.05
POP_BACKOFF_MAX = 2.0

Handler = Callable[[list[Delivery]], Awaitable[None]]


@dataclass
class ConsumeStats:
    """The live counters of a consume loop."""

    popped: int = 0  # messages given to the handler
    acked: int = 0  # messages settled as completed by an accepted ack
    nacked: int = 0  # messages handed back by an accepted failed or retry ack
    ack_errors: int = 0  # acks that failed or were refused
    handler_errors: int = 0  # batches whose handler raised
    pop_errors: int = 0  # pops that failed and were retried


async def consume(client: "Client", queue: str, handler: Handler, *, stop: Optional[asyncio.Event] = None,
                  group: str = "", max: int = 0, partitions: int = 0, wait: float = DEFAULT_CONSUME_WAIT,
                  lease: float = 0, from_: Optional[str] = None, ack_inflight: int = DEFAULT_ACK_INFLIGHT,
                  concurrency: int = 1, drain_timeout: float = 0,
                  on_ack_error: Optional[Callable[[BaseException], None]] = None,
                  on_pop_error: Optional[Callable[[BaseException], None]] = None,
                  stats: Optional[ConsumeStats] = None) -> None:
    """Pop batches from queue and call handler with each, until stop is set.

    When the handler returns, the batch is acked with one cumulative
    "completed" ack per (partition, lease) at its last offset. When it
    raises, the batch is acked "failed" at the first offset of each
    (partition, lease), so that it is delivered again with its attempt
    counted (and dead-lettered once max_attempts are spent); if stop was set
    by then, "retry" instead, which spends no attempt. Acks are sent as
    tasks, at most ack_inflight at once, so the next pop overlaps them; when
    the bound is reached the pop loops wait, and an ack is never dropped. A
    failed ack is counted and told to on_ack_error, never fatal.

    Pop errors are retried with a backoff (told to on_pop_error), except a
    BadRequest and a closed connection, which stop consume and are raised.
    When stop is set consume stops popping (a long poll in progress is
    abandoned: what it leased is delivered again when the lease expires),
    gives back a batch it has not yet handed to the handler, lets a running
    handler finish, waits for the acks in flight (at most drain_timeout,
    default the client's timeout) and returns, or raises DrainTimeoutError.
    Cancelling the task that runs consume does the same and then re-raises
    the cancellation. With concurrency > 1 the handler runs concurrently,
    but never with two batches of one partition while their leases hold.
    """
    if handler is None:
        raise ValueError(f"comb: consume {queue}: no handler")
    from .client import check_queue

    try:
        check_queue(queue)
    except BadRequest as e:
        e.op = f"consume {queue}"
        raise
    c = _Consumer(
        client=client, queue=queue, handler=handler, group=group, max=max, partitions=partitions,
        wait=wait if wait and wait > 0 else DEFAULT_CONSUME_WAIT, lease=lease, from_=from_,
        inflight=asyncio.Semaphore(ack_inflight if ack_inflight > 0 else DEFAULT_ACK_INFLIGHT),
        on_ack_error=on_ack_error, on_pop_error=on_pop_error, stats=stats if stats is not None else ConsumeStats(),
    )
    await c.run(stop, concurrency if concurrency > 0 else 1, drain_timeout if drain_timeout > 0 else client.timeout)


class _Consumer:
    def __init__(self, *, client: "Client", queue: str, handler: Handler, group: str, max: int, partitions: int,
                 wait: float, lease: float, from_: Optional[str], inflight: asyncio.Semaphore,
                 on_ack_error: Optional[Callable[[BaseException], None]],
                 on_pop_error: Optional[Callable[[BaseException], None]], stats: ConsumeStats) -> None:
        self.client, self.queue, self.handler = client, queue, handler
        self.group, self.max, self.partitions = group, max, partitions
        self.wait, self.lease, self.from_ = wait, lease, from_
        self.inflight = inflight
        self.on_ack_error, self.on_pop_error = on_ack_error, on_pop_error
        self.stats = stats
        self.acks: set[asyncio.Task[None]] = set()
        # Set when the loops must stop: by the caller's stop, or a fatal error.
        self.halt = asyncio.Event()
        self.fatal: Optional[BaseException] = None
        self.stop: Optional[asyncio.Event] = None

    def _halted(self) -> bool:
        return self.halt.is_set() or (self.stop is not None and self.stop.is_set())

    async def run(self, stop: Optional[asyncio.Event], concurrency: int, drain_timeout: float) -> None:
        self.stop = stop
        watcher = None
        if stop is not None:
            watcher = asyncio.get_running_loop().create_task(self._watch(stop))
        loops = [asyncio.get_running_loop().create_task(self.loop()) for _ in range(concurrency)]
        cancelled = False
        try:
            for r in await asyncio.gather(*loops, return_exceptions=True):
                if isinstance(r, BaseException) and self.fatal is None:
                    self.fatal = r
        except asyncio.CancelledError:
            # The caller cancelled consume: stop the loops as a stop would,
            # then drain below before re-raising.
            cancelled = True
            self.halt.set()
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        finally:
            if watcher is not None:
                watcher.cancel()
        timed_out = False
        if self.acks:
            done, pending = await asyncio.wait(set(self.acks), timeout=drain_timeout)
            if pending:
                timed_out = True
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        if cancelled:
            raise asyncio.CancelledError()
        if self.fatal is not None:
            raise self.fatal
        if timed_out:
            raise DrainTimeoutError(f"comb: consume {self.queue}: acks still in flight after {drain_timeout:g}s")

    async def _watch(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.halt.set()

    async def _pop(self) -> Optional[list[Delivery]]:
        """One pop, abandoned (None) if halt is set first."""
        pop = asyncio.get_running_loop().create_task(self.client.pop(
            self.queue, group=self.group, max=self.max, partitions=self.partitions, wait=self.wait,
            lease=self.lease, from_=self.from_))
        halted = asyncio.get_running_loop().create_task(self.halt.wait())
        try:
            await asyncio.wait({pop, halted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            halted.cancel()
            if not pop.done():
                pop.cancel()
                # Let the cancellation land; the pop may also have finished
                # first, and then its batch is handed back by the caller.
                await asyncio.wait({pop})
        if pop.cancelled():
            return None
        return pop.result()

    async def loop(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException:
            # A bug or a handler's BaseException: stop the other loops too.
            self.halt.set()
            raise

    async def _loop(self) -> None:
        backoff = 0.0
        while not self._halted():
            try:
                batch = await self._pop()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, BadRequest) or _is_closed(e):
                    self.fatal = self.fatal or e
                    self.halt.set()
                    return
                self.stats.pop_errors += 1
                if self.on_pop_error is not None:
                    self.on_pop_error(e)
                backoff = min(max(2 * backoff, POP_BACKOFF_MIN), POP_BACKOFF_MAX)
                try:
                    await asyncio.wait_for(self.halt.wait(), backoff)
                except asyncio.TimeoutError:
                    pass
                continue
            backoff = 0.0
            if batch is None:
                return
            if not batch:
                continue
            if self._halted():
                # Stopped between the pop and the handler: give the batch
                # back at once rather than let its lease run out.
                await self.settle(batch, ACK_RETRY)
                return
            self.stats.popped += len(batch)
            try:
                await self.handler(batch)
            except asyncio.CancelledError:
                await self.settle(batch, ACK_RETRY)
                raise
            except Exception:
                self.stats.handler_errors += 1
                await self.settle(batch, ACK_RETRY if self._halted() else ACK_FAILED)
                continue
            await self.settle(batch, ACK_COMPLETED)

    async def settle(self, batch: list[Delivery], status: str) -> None:
        """One ack per (partition, lease) of batch, each sent as a task:
        cumulative at the last offset for completed, at the first otherwise,
        so that nothing of the batch is settled. It waits for a free slot of
        ack_inflight before each."""
        spans: dict[tuple[str, str], list[int]] = {}  # (partition, lease) -> [first, last, n]
        for d in batch:
            if not d.lease:
                continue  # auto-acked: nothing to settle
            s = spans.get((d.partition, d.lease))
            if s is None:
                spans[(d.partition, d.lease)] = [d.offset, d.offset, 1]
            else:
                s[0], s[1], s[2] = min(s[0], d.offset), max(s[1], d.offset), s[2] + 1
        for (partition, lease), (first, last, n) in spans.items():
            a = Ack(partition=partition, lease=lease, offset=last if status == ACK_COMPLETED else first, status=status)
            await self.inflight.acquire()
            t = asyncio.get_running_loop().create_task(self._send_ack(a, n))
            self.acks.add(t)
            t.add_done_callback(self._ack_done)

    def _ack_done(self, t: "asyncio.Task[None]") -> None:
        self.acks.discard(t)
        self.inflight.release()

    async def _send_ack(self, a: Ack, n: int) -> None:
        """Send one ack and count its outcome. Errors that prove the ack was
        not applied (429, 503, no responders) are retried a few times; a
        timeout is not, since the ack may have been applied."""
        attempts = 3
        err: Union[BaseException, None] = None
        for i in range(attempts):
            try:
                res = await self.client.ack(self.queue, [a], group=self.group)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                err = e
                if not _retryable(e) or i == attempts - 1:
                    break
                await asyncio.sleep((i + 1) * POP_BACKOFF_MIN)
                continue
            if res[0].ok:
                if a.status == ACK_COMPLETED:
                    self.stats.acked += n
                else:
                    self.stats.nacked += n
                return
            err = AckRefused(f"comb: ack {self.queue} {a.partition}/{a.offset}: refused: {res[0].error}")
            break
        self.stats.ack_errors += 1
        if self.on_ack_error is not None and err is not None:
            self.on_ack_error(err)


def _retryable(e: BaseException) -> bool:
    if isinstance(e, CombError):
        return e.temporary
    return isinstance(e, NoRespondersError)


def _is_closed(e: BaseException) -> bool:
    from .client import CLOSED_ERRORS

    return isinstance(e, CLOSED_ERRORS)
