// The client's shapes: camelCase forms of the wire's JSON (docs/protocol.md).

import type { Data } from "./data.js";

/** The partition of a message pushed without one. */
export const DefaultPartition = "default";
/** The consumer group of a pop or ack that names none. */
export const DefaultGroup = "default";
/** The first subject token of every request. */
export const DefaultPrefix = "comb";

/** Push statuses, in PushResult.status. */
export const PushStatus = {
  /** Durable in PostgreSQL at `offset`. */
  Stored: "stored",
  /** The producer id was seen within the dedup window; `offset` is the original's. */
  Duplicate: "duplicate",
  /** In the broker's disk spool while PostgreSQL is away, no offset yet; stored in order when it is back. */
  Spooled: "spooled",
} as const;

/** How an ack settles a message; see docs/protocol.md, "Ack". */
export type AckStatus = "completed" | "retry" | "failed" | "dead";

/** Ack statuses by name. */
export const AckStatus = {
  /** Done, with every earlier message of the lease. */
  Completed: "completed",
  /** Earlier messages done; this one and the rest of the lease deliverable again, no attempt spent. */
  Retry: "retry",
  /** Like retry, but spends an attempt: dead-lettered once max_attempts are spent. */
  Failed: "failed",
  /** Earlier messages done; this one dead-lettered at once, the lease goes on. */
  Dead: "dead",
} as const satisfies Record<string, AckStatus>;

/** One message to push. */
export interface Message {
  /** Order is kept within a partition only; empty means "default". */
  partition?: string;
  /** Optional producer id: not stored again within the queue's dedup window. */
  id?: string;
  /** The message: bytes, or a string sent as its UTF-8 encoding. */
  data: Data;
  /** Headers kept with the message; names starting with "Comb-" are reserved. */
  headers?: MessageHeaders;
  /**
   * Hold the message back this many milliseconds after it is stored, or
   * until a time (at most one). Its partition's later messages wait behind it.
   */
  delayMs?: number;
  notBefore?: Date;
}

/** A message's headers: each name with one value or several. Replies always give arrays. */
export type MessageHeaders = Record<string, string | string[]>;

/** The outcome of one pushed message. */
export interface PushResult {
  partition: string;
  /** Where the message is; absent for a spooled message. */
  offset?: number;
  /** One of PushStatus. */
  status: string;
}

/** Options of put, sent as the headers Comb-Partition, Comb-Id, Comb-Delay-Ms and Comb-Not-Before. */
export interface PutOptions {
  partition?: string;
  id?: string;
  /** The message's own headers, sent as NATS headers. */
  headers?: MessageHeaders;
  delayMs?: number;
  notBefore?: Date;
}

/** Where a group starts on a partition it has never read. */
export type From = "all" | "new" | Date | string;

/** Options of pop; all optional. */
export interface PopOptions {
  /** The consumer group; default "default". */
  group?: string;
  /** Pop only this partition; default any partition with messages ready. */
  partition?: string;
  /** Most messages returned, 1–10000; default 100. */
  max?: number;
  /** Most partitions one pop leases, 1–1000; default 1. */
  partitions?: number;
  /** Long-poll this long (ms) when nothing is ready; the request's timeout grows by it. */
  waitMs?: number;
  /** Lease time in ms; default the queue's. */
  leaseMs?: number;
  /** Settle on delivery: at most once. */
  autoAck?: boolean;
  /** "all" (default), "new", or a time: the first message created at or after it. */
  from?: From;
  /**
   * Stops waiting for the reply when aborted; the pop rejects with the
   * signal's reason. A pop abandoned this way may still lease messages,
   * which are delivered again when that lease expires.
   */
  signal?: AbortSignal;
}

/** One delivered message. */
export class Delivery {
  constructor(
    readonly partition: string,
    readonly offset: number,
    /** Names the lease the message is held under; "" with autoAck. */
    readonly lease: string,
    /** Deliveries of this message to the group, from 1. */
    readonly attempt: number,
    /** The push time (millisecond precision). */
    readonly createdAt: Date,
    /** The message bytes, exactly as pushed. */
    readonly data: Uint8Array,
    /** The producer id, "" when none was given. */
    readonly id: string = "",
    /** The message's headers, {} when it has none. */
    readonly headers: Record<string, string[]> = {},
  ) {}

  /** The bytes as UTF-8 text. */
  text(): string {
    return new TextDecoder().decode(this.data);
  }

  /** The bytes parsed as JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

/** One ack: settles the message at offset and, cumulatively, the earlier ones of its lease. */
export interface Ack {
  /** Default "default". */
  partition?: string;
  offset: number;
  lease: string;
  /** Default "completed". */
  status?: AckStatus;
}

/** The outcome of one ack; ok false (with error) when it settled nothing, e.g. an expired lease. */
export interface AckResult {
  ok: boolean;
  error?: string;
}

/** The outcome of renewing one lease. */
export interface RenewResult {
  lease: string;
  ok: boolean;
  expiresAt?: Date;
  error?: string;
}

/** A queue's settings (docs/protocol.md, "Queue settings"). */
export interface QueueConfig {
  leaseMs: number;
  maxAttempts: number;
  deadLetter: boolean;
  dedupWindowS: number;
  completedRetentionS: number;
  maxAgeS: number;
  delayMs: number;
  maxMessages: number;
  maxBytes: number;
  maxMessageBytes: number;
}

/** Settings to change with configure; a field left out keeps its value. */
export type ConfigPatch = Partial<QueueConfig>;

/** The wire name of each setting. */
export const configWireNames = {
  leaseMs: "lease_ms",
  maxAttempts: "max_attempts",
  deadLetter: "dead_letter",
  dedupWindowS: "dedup_window_s",
  completedRetentionS: "completed_retention_s",
  maxAgeS: "max_age_s",
  delayMs: "delay_ms",
  maxMessages: "max_messages",
  maxBytes: "max_bytes",
  maxMessageBytes: "max_message_bytes",
} as const satisfies Record<keyof QueueConfig, string>;

/** One partition's figures. */
export interface PartitionInfo {
  name: string;
  /** The offset the next message will get. */
  nextOffset: number;
  /** The oldest retained offset. */
  lowOffset: number;
}

/** One consumer group's state over a queue. */
export interface GroupInfo {
  name: string;
  /** Messages the group has not completed. */
  pending: number;
  /** Partitions the group holds a lease on. */
  leased: number;
}

/** A queue's settings and live figures. */
export interface Info {
  name: string;
  config: QueueConfig;
  createdAt: Date;
  /** Retained messages. */
  messages: number;
  /** Retained payload bytes. */
  bytes: number;
  /** Dead letters kept. */
  deadLetters: number;
  /** The whole queue's partitions and groups, on every page. */
  partitionCount: number;
  groupCount: number;
  partitions: PartitionInfo[];
  groups: GroupInfo[];
  /** Cursor of the next page (infoPage); "" after the last. */
  next: string;
}

/** Selects a page of infoPage or listPage; all optional. */
export interface PageQuery {
  /** Default the service's (1000). */
  limit?: number;
  /** The next of the previous page. */
  after?: string;
}

/** One page of listPage. */
export interface QueuePage {
  queues: QueueSummary[];
  /** Cursor of the next page; "" after the last. */
  next: string;
}

/** One queue's line in list. */
export interface QueueSummary {
  name: string;
  partitions: number;
  messages: number;
  bytes: number;
  groups: number;
  /** The largest backlog of any group. */
  pending: number;
}

/** Selects a page of dead letters; all optional. */
export interface DeadLetterQuery {
  /** Default every group. */
  group?: string;
  /** 1–1000; default 100. */
  limit?: number;
  /** The `next` of the previous page. */
  after?: string;
}

/** A message a group gave up on. */
export interface DeadLetter {
  dlqId: string;
  group: string;
  partition: string;
  offset: number;
  /** The producer id, "" when none. */
  id: string;
  /** Deliveries it had. */
  attempts: number;
  /** The ack status that dead-lettered it: "failed" or "dead". */
  reason: string;
  deadAt: Date;
  data: Uint8Array;
  /** The message's headers, {} when it had none. */
  headers: Record<string, string[]>;
}

/** A page of dead letters and the cursor of the next ("" after the last page). */
export interface DeadLetterPage {
  deadLetters: DeadLetter[];
  next: string;
}

/** Where seek moves a group's cursors: "start", "end" or a time. */
export type SeekTo = "start" | "end" | Date | string;

/** Options of seek. */
export interface SeekOptions {
  /** Default "default"; created if it does not exist. */
  group?: string;
  /** Default every partition. */
  partition?: string;
  to: SeekTo;
}
