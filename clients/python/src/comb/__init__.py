"""comb: an asyncio client for Comb, a partitioned message queue on PostgreSQL that speaks NATS.

    client = await comb.connect("nats://127.0.0.1:4222")
    await client.put("orders", b'{"sku":42}', partition="eu")
    batch = await client.pop("orders", group="billing", wait=5)
    await client.ack("orders", [comb.Ack.of(d) for d in batch], group="billing")

It runs on nats-py when that is installed, else on the small built-in
NATS connection of comb._nats. docs/protocol.md is the protocol.
"""

__version__ = "0.1.0"

from ._nats import ConnectionClosedError, NatsError
from .client import DEFAULT_PREFIX, DEFAULT_TIMEOUT, HEADER_ID, HEADER_PARTITION, Client, connect
from .consume import DEFAULT_ACK_INFLIGHT, DEFAULT_CONSUME_WAIT, ConsumeStats, consume
from .errors import (
    AckRefused,
    BadRequest,
    CombError,
    Conflict,
    DrainTimeoutError,
    Internal,
    LimitReached,
    NoRespondersError,
    NotFound,
    RequestTimeoutError,
    TooLarge,
    Unavailable,
)
from .types import (
    ACK_COMPLETED,
    ACK_DEAD,
    ACK_FAILED,
    ACK_RETRY,
    DEFAULT_GROUP,
    DEFAULT_PARTITION,
    FROM_ALL,
    FROM_NEW,
    SEEK_END,
    SEEK_START,
    STATUS_DUPLICATE,
    STATUS_SPOOLED,
    STATUS_STORED,
    Ack,
    AckResult,
    Config,
    DeadLetter,
    Delivery,
    GroupInfo,
    Info,
    Message,
    PartitionInfo,
    PushResult,
    QueueSummary,
    RenewResult,
)

__all__ = [name for name in dir() if not name.startswith("_")]
