"""The client's values: what it sends and what replies become.

Field names follow docs/protocol.md; durations that the protocol gives in
milliseconds or seconds keep their wire names and units (lease_ms,
dedup_window_s), while the client's own options (pop's wait and lease)
are in seconds, as asyncio's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Optional, Union

from . import _wire

DEFAULT_PARTITION = "default"
DEFAULT_GROUP = "default"

# Push statuses (PushResult.status).
STATUS_STORED = "stored"
STATUS_DUPLICATE = "duplicate"
STATUS_SPOOLED = "spooled"  # in the broker's disk spool, no offset yet; stored when PostgreSQL is back

# Ack statuses (Ack.status).
ACK_COMPLETED = "completed"
ACK_RETRY = "retry"
ACK_FAILED = "failed"
ACK_DEAD = "dead"

# Where a new group starts (pop's from_), besides an RFC 3339 time.
FROM_ALL = "all"
FROM_NEW = "new"

# Where seek moves a group, besides an RFC 3339 time.
SEEK_START = "start"
SEEK_END = "end"


@dataclass(frozen=True)
class Message:
    """One message to push: bytes, and optionally a partition, a producer id,
    headers (a name with one value or a list of them; names starting with
    "Comb-" are reserved) and a hold: delay seconds after it is stored, or
    not before a time (at most one). A held message holds back its
    partition's later messages too, so the partition keeps its order."""

    data: bytes
    partition: str = ""
    id: str = ""
    headers: Optional[dict[str, Union[str, list[str]]]] = None
    delay: float = 0
    not_before: Optional[datetime] = None


@dataclass(frozen=True)
class PushResult:
    partition: str
    offset: Optional[int]  # None for a spooled message
    status: str

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "PushResult":
        return cls(partition=d.get("partition", ""), offset=d.get("offset"), status=d.get("status", ""))


@dataclass(frozen=True)
class Delivery:
    """One delivered message, its bytes decoded from data or data_b64."""

    partition: str
    offset: int
    data: bytes
    lease: str = ""  # empty with auto_ack
    attempt: int = 0
    id: str = ""
    created_at: Optional[datetime] = None
    headers: dict[str, list[str]] = field(default_factory=dict)  # each name's values; {} when none

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "Delivery":
        return cls(
            partition=d["partition"],
            offset=d["offset"],
            data=_wire.decode_data(d),
            lease=d.get("lease", ""),
            attempt=d.get("attempt", 0),
            id=d.get("id", ""),
            created_at=_wire.parse_time(d.get("created_at")),
            headers=dict(d.get("headers") or {}),
        )


@dataclass(frozen=True)
class Ack:
    """Settles a leased message and, cumulatively, the earlier ones of its lease."""

    partition: str
    offset: int
    lease: str
    status: str = ACK_COMPLETED

    def _wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"offset": self.offset, "lease": self.lease}
        if self.partition:
            d["partition"] = self.partition
        if self.status:
            d["status"] = self.status
        return d

    @classmethod
    def of(cls, d: Delivery, status: str = ACK_COMPLETED) -> "Ack":
        """The ack of a delivery."""
        return cls(partition=d.partition, offset=d.offset, lease=d.lease, status=status)


@dataclass(frozen=True)
class AckResult:
    """The outcome of one ack; ok False means it settled nothing, and error says why."""

    ok: bool
    error: str = ""


@dataclass(frozen=True)
class RenewResult:
    lease: str
    ok: bool
    expires_at: Optional[datetime] = None
    error: str = ""

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "RenewResult":
        return cls(lease=d.get("lease", ""), ok=bool(d.get("ok")), expires_at=_wire.parse_time(d.get("expires_at")),
                   error=d.get("error", ""))


@dataclass(frozen=True)
class Config:
    """A queue's settings (docs/protocol.md "Queue settings")."""

    lease_ms: int = 30000
    max_attempts: int = 3
    dead_letter: bool = True
    dedup_window_s: int = 0
    completed_retention_s: int = 0
    max_age_s: int = 0
    delay_ms: int = 0
    max_messages: int = 0
    max_bytes: int = 0
    max_message_bytes: int = 1048576

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "Config":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


CONFIG_FIELDS = tuple(f.name for f in fields(Config))


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    next_offset: int
    low_offset: int


@dataclass(frozen=True)
class GroupInfo:
    name: str
    pending: int
    leased: int


@dataclass(frozen=True)
class Info:
    """A queue's settings and live figures."""

    name: str
    config: Config
    created_at: Optional[datetime]
    messages: int
    bytes: int
    dead_letters: int
    partitions: list[PartitionInfo] = field(default_factory=list)
    groups: list[GroupInfo] = field(default_factory=list)
    partition_count: int = 0  # the whole queue's, on every page
    group_count: int = 0
    next: str = ""  # cursor of the next page (info_page); "" after the last

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "Info":
        return cls(
            name=d["name"],
            config=Config._from(d.get("config") or {}),
            created_at=_wire.parse_time(d.get("created_at")),
            messages=d.get("messages", 0),
            bytes=d.get("bytes", 0),
            dead_letters=d.get("dead_letters", 0),
            partitions=[PartitionInfo(p["name"], p.get("next_offset", 0), p.get("low_offset", 0))
                        for p in d.get("partitions") or []],
            groups=[GroupInfo(g["name"], g.get("pending", 0), g.get("leased", 0)) for g in d.get("groups") or []],
            partition_count=d.get("partition_count", 0),
            group_count=d.get("group_count", 0),
            next=d.get("next") or "",
        )

    def group(self, name: str) -> Optional[GroupInfo]:
        """The group called name, or None."""
        return next((g for g in self.groups if g.name == name), None)


@dataclass(frozen=True)
class QueueSummary:
    name: str
    partitions: int
    messages: int
    bytes: int
    groups: int
    pending: int  # the largest backlog of any group

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "QueueSummary":
        return cls(d["name"], d.get("partitions", 0), d.get("messages", 0), d.get("bytes", 0),
                   d.get("groups", 0), d.get("pending", 0))


@dataclass(frozen=True)
class DeadLetter:
    """A message a group gave up on, its bytes decoded from data or data_b64."""

    dlq_id: str
    group: str
    partition: str
    offset: int
    data: bytes
    attempts: int = 0
    reason: str = ""
    id: str = ""
    dead_at: Optional[datetime] = None
    headers: dict[str, list[str]] = field(default_factory=dict)  # the message's; {} when none

    @classmethod
    def _from(cls, d: dict[str, Any]) -> "DeadLetter":
        return cls(
            dlq_id=d["dlq_id"],
            group=d.get("group", ""),
            partition=d.get("partition", ""),
            offset=d.get("offset", 0),
            data=_wire.decode_data(d),
            attempts=d.get("attempts", 0),
            reason=d.get("reason", ""),
            id=d.get("id", ""),
            dead_at=_wire.parse_time(d.get("dead_at")),
            headers=dict(d.get("headers") or {}),
        )
