// The Comb client: one method per request of docs/protocol.md.

import {
  errors as natsErrors,
  headers as natsHeaders,
  Match,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from "@nats-io/transport-node";

import { consume, type ConsumeOptions, type Handler } from "./consume.js";
import { bytesOf, dataField, messageBytes, parseReply, type Data, type Value } from "./data.js";
import { badRequest, Code, CombError, Header, TransportError } from "./errors.js";
import {
  configWireNames,
  DefaultPrefix,
  Delivery,
  type Ack,
  type AckResult,
  type ConfigPatch,
  type DeadLetter,
  type DeadLetterPage,
  type DeadLetterQuery,
  type From,
  type Info,
  type Message,
  type PageQuery,
  type PopOptions,
  type PushResult,
  type PutOptions,
  type QueueConfig,
  type QueuePage,
  type QueueSummary,
  type RenewResult,
  type SeekOptions,
} from "./types.js";

/** How long a request waits for its reply by default, in ms, on top of a pop's long poll. */
export const DefaultTimeoutMs = 10_000;

/** Options of a Client. */
export interface ClientOptions {
  /** The first subject token, for a broker started with another -prefix; default "comb". */
  prefix?: string;
  /** How long a request waits for its reply, in ms; a pop waits its waitMs on top. Default 10000. */
  timeoutMs?: number;
}

/** The largest page of info and list (protocol.MaxInfoLimit, MaxListLimit): info() and list() read every page with it. */
const MaxPageLimit = 10_000;

const utf8 = new TextEncoder();
const strictUTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

type Obj = { [k: string]: unknown };

/**
 * Sends Comb requests over a NATS connection from @nats-io/transport-node.
 * It does not own the connection: close it yourself. Safe to share.
 */
export class Client {
  readonly nc: NatsConnection;
  readonly prefix: string;
  readonly timeoutMs: number;

  constructor(nc: NatsConnection, opts: ClientOptions = {}) {
    this.nc = nc;
    this.prefix = opts.prefix || DefaultPrefix;
    this.timeoutMs = opts.timeoutMs && opts.timeoutMs > 0 ? opts.timeoutMs : DefaultTimeoutMs;
  }

  /**
   * Appends messages and returns one result per message, in order, once
   * they are durable. Pushing to a queue that does not exist creates it
   * with default settings. All or nothing: one bad message refuses all.
   */
  async push(queue: string, messages: Message[]): Promise<PushResult[]> {
    if (messages.length === 0) return [];
    const parts = messages.map((m) => {
      let s = "{";
      if (m.partition) s += `"partition":${JSON.stringify(m.partition)},`;
      if (m.id) s += `"id":${JSON.stringify(m.id)},`;
      if (m.headers && Object.keys(m.headers).length > 0) s += `"headers":${JSON.stringify(m.headers)},`;
      if (m.delayMs && m.delayMs > 0) s += `"delay_ms":${Math.max(1, Math.round(m.delayMs))},`;
      if (m.notBefore) s += `"not_before":${JSON.stringify(m.notBefore.toISOString())},`;
      return s + dataField(bytesOf(m.data)) + "}";
    });
    const rep = await this.call("push", queue, `{"messages":[${parts.join(",")}]}`);
    return pushResults(rep, messages.length, `push ${queue}`);
  }

  /**
   * Appends one message, its bytes sent raw as the request body and its
   * options as headers: the verb the nats CLI uses.
   */
  async put(queue: string, data: Data, opts: PutOptions = {}): Promise<PushResult> {
    let hdrs: MsgHdrs | undefined;
    const set = (name: string, v: string) => {
      hdrs ??= natsHeaders();
      hdrs.append(name, v);
    };
    for (const [name, v] of Object.entries(opts.headers ?? {})) {
      for (const one of Array.isArray(v) ? v : [v]) set(name, one);
    }
    if (opts.partition) set(Header.Partition, opts.partition);
    if (opts.id) set(Header.Id, opts.id);
    if (opts.delayMs && opts.delayMs > 0) set(Header.DelayMs, String(Math.max(1, Math.round(opts.delayMs))));
    if (opts.notBefore) set(Header.NotBefore, opts.notBefore.toISOString());
    const rep = await this.call("put", queue, bytesOf(data), { headers: hdrs });
    return pushResults(rep, 1, `put ${queue}`)[0]!;
  }

  /**
   * Leases the next messages of a queue for a group. An empty array, not
   * an error, when nothing became ready within waitMs. Settle them with ack
   * before the lease expires, or they are delivered again.
   */
  async pop(queue: string, opts: PopOptions = {}): Promise<Delivery[]> {
    return (await this.popWith(queue, opts, undefined)).messages;
  }

  /**
   * Settles acks of opts.group and then pops as pop does, in one request
   * (a pop that carries acks, docs/protocol.md): one round trip where ack
   * and then pop take two. Returns the messages and one result per ack, in
   * order; an ack the service refuses is a result with ok false and does
   * not stop the pop. Without acks it is pop.
   */
  async ackAndPop(queue: string, acks: Ack[], opts: PopOptions = {}): Promise<{ messages: Delivery[]; acks: AckResult[] }> {
    return this.popWith(queue, opts, acks.length > 0 ? acks : undefined);
  }

  private async popWith(queue: string, opts: PopOptions, acks: Ack[] | undefined): Promise<{ messages: Delivery[]; acks: AckResult[] }> {
    const body: Obj = {};
    if (opts.group) body.group = opts.group;
    if (opts.partition) body.partition = opts.partition;
    if (opts.max) body.max = opts.max;
    if (opts.partitions) body.partitions = opts.partitions;
    if (opts.waitMs && opts.waitMs > 0) body.wait_ms = Math.max(1, Math.round(opts.waitMs));
    if (opts.leaseMs && opts.leaseMs > 0) body.lease_ms = Math.max(1, Math.round(opts.leaseMs));
    if (opts.autoAck) body.auto_ack = true;
    if (opts.from !== undefined) body.from = timeArg(opts.from);
    if (acks) body.acks = acks.map(ackBody);
    const op = `pop ${queue}`;
    const msg = await this.request("pop", queue, JSON.stringify(body), {
      extraMs: typeof body.wait_ms === "number" ? body.wait_ms : 0,
      signal: opts.signal,
    });
    const rep = decodeRaw(msg, op);
    const messages = list(rep, "messages", op).map((m) => {
      try {
        return new Delivery(
          str(m.partition),
          num(m.offset),
          str(m.lease),
          num(m.attempt),
          new Date(str(m.created_at)),
          messageBytes(m.data as Value, m.data_b64 as Value),
          str(m.id),
          headersOf(m.headers),
        );
      } catch (e) {
        throw new Error(`comb: ${op}: message ${String(m.partition)}/${String(m.offset)}: ${(e as Error).message}`, { cause: e });
      }
    });
    return { messages, acks: acks ? ackResults(list(rep, "acks", op), acks.length, op) : [] };
  }

  /**
   * Settles leased messages for a group (empty: "default") and returns one
   * result per ack. An ack the service refuses (expired lease, offset
   * outside the lease) is a result with ok false, not an error; an unknown
   * status is a CombError 400 for the whole request.
   */
  async ack(queue: string, group: string | undefined, acks: Ack[]): Promise<AckResult[]> {
    if (acks.length === 0) return [];
    const body: Obj = { acks: acks.map(ackBody) };
    if (group) body.group = group;
    const op = `ack ${queue}`;
    const rep = await this.call("ack", queue, JSON.stringify(body));
    return ackResults(list(rep, "results", op), acks.length, op);
  }

  /** Extends live leases to leaseMs from now (default: the queue's lease time); one result per lease. */
  async renew(queue: string, leases: string[], leaseMs?: number): Promise<RenewResult[]> {
    if (leases.length === 0) return [];
    const body: Obj = { leases };
    if (leaseMs && leaseMs > 0) body.lease_ms = Math.max(1, Math.round(leaseMs));
    const op = `renew ${queue}`;
    const res = list(await this.call("renew", queue, JSON.stringify(body)), "results", op);
    if (res.length !== leases.length) {
      throw new Error(`comb: ${op}: ${res.length} results for ${leases.length} leases`);
    }
    return res.map((r) => {
      const out: RenewResult = { lease: str(r.lease), ok: r.ok === true };
      if (typeof r.expires_at === "string") out.expiresAt = new Date(r.expires_at);
      if (typeof r.error === "string" && r.error) out.error = r.error;
      return out;
    });
  }

  /**
   * Creates the queue if needed, merges the given settings into its
   * configuration and returns all of them. An empty patch reads the
   * settings (creating the queue with defaults).
   */
  async configure(queue: string, patch: ConfigPatch = {}): Promise<QueueConfig> {
    const op = `configure ${queue}`;
    const body: Obj = {};
    for (const [k, v] of Object.entries(patch)) {
      if (v === undefined) continue;
      const wire = (configWireNames as Record<string, string>)[k];
      if (wire === undefined) {
        throw badRequest(op, `unknown setting ${JSON.stringify(k)}; want one of ${Object.keys(configWireNames).join(", ")}`);
      }
      body[wire] = v;
    }
    return queueConfig(await this.call("configure", queue, JSON.stringify(body)));
  }

  /** A queue's settings and live figures with all its partitions and groups, reading every page (infoPage); a CombError 404 when it does not exist. */
  async info(queue: string): Promise<Info> {
    let page = await this.infoPage(queue, { limit: MaxPageLimit });
    const partitions = [...page.partitions];
    const groups = [...page.groups];
    while (page.next !== "") {
      page = await this.infoPage(queue, { limit: MaxPageLimit, after: page.next });
      partitions.push(...page.partitions);
      groups.push(...page.groups);
    }
    return { ...page, partitions, groups };
  }

  /** One page of a queue's info: the whole queue's figures, up to limit partitions and limit groups, and the cursor of the next page. */
  async infoPage(queue: string, q: PageQuery = {}): Promise<Info> {
    const r = await this.call("info", queue, pageBody(q));
    return {
      name: str(r.name),
      config: queueConfig(r.config as Obj),
      createdAt: new Date(str(r.created_at)),
      messages: num(r.messages),
      bytes: num(r.bytes),
      deadLetters: num(r.dead_letters),
      partitionCount: num(r.partition_count),
      groupCount: num(r.group_count),
      partitions: list(r, "partitions", `info ${queue}`).map((p) => ({
        name: str(p.name),
        nextOffset: num(p.next_offset),
        lowOffset: num(p.low_offset),
      })),
      groups: list(r, "groups", `info ${queue}`).map((g) => ({
        name: str(g.name),
        pending: num(g.pending),
        leased: num(g.leased),
      })),
      next: typeof r.next === "string" ? r.next : "",
    };
  }

  /** One summary per queue, by name, reading every page (listPage). */
  async list(): Promise<QueueSummary[]> {
    const out: QueueSummary[] = [];
    let after = "";
    do {
      const page = await this.listPage({ limit: MaxPageLimit, after });
      out.push(...page.queues);
      after = page.next;
    } while (after !== "");
    return out;
  }

  /** Up to limit queues by name after the cursor, and the cursor of the next page. */
  async listPage(q: PageQuery = {}): Promise<QueuePage> {
    const r = await this.call("list", "", pageBody(q));
    return {
      queues: list(r, "queues", "list").map((q) => ({
        name: str(q.name),
        partitions: num(q.partitions),
        messages: num(q.messages),
        bytes: num(q.bytes),
        groups: num(q.groups),
        pending: num(q.pending),
      })),
      next: typeof r.next === "string" ? r.next : "",
    };
  }

  /** Deletes a queue with all its messages, groups and dead letters; a CombError 404 when it does not exist. */
  async delete(queue: string): Promise<void> {
    await this.call("delete", queue, "{}");
  }

  /** A page of a queue's dead letters, oldest first. */
  async deadLetters(queue: string, q: DeadLetterQuery = {}): Promise<DeadLetterPage> {
    const body: Obj = {};
    if (q.group) body.group = q.group;
    if (q.limit) body.limit = q.limit;
    if (q.after) body.after = q.after;
    const op = `dlq ${queue}`;
    const rep = decodeRaw(await this.request("dlq", queue, JSON.stringify(body)), op);
    const deadLetters = list(rep, "dead_letters", op).map((d): DeadLetter => {
      try {
        return {
          dlqId: str(d.dlq_id),
          group: str(d.group),
          partition: str(d.partition),
          offset: num(d.offset),
          id: str(d.id),
          attempts: num(d.attempts),
          reason: str(d.reason),
          deadAt: new Date(str(d.dead_at)),
          data: messageBytes(d.data as Value, d.data_b64 as Value),
          headers: headersOf(d.headers),
        };
      } catch (e) {
        throw new Error(`comb: ${op}: dead letter ${String(d.dlq_id)}: ${(e as Error).message}`, { cause: e });
      }
    });
    return { deadLetters, next: str(rep.next) };
  }

  /**
   * Pushes the chosen dead letters again into their partitions as new
   * messages (every group receives them), removes them from the list and
   * returns how many it replayed; ids no longer listed are skipped.
   */
  async replay(queue: string, dlqIds: string[]): Promise<number> {
    if (dlqIds.length === 0) return 0;
    return num((await this.call("dlq", queue, JSON.stringify({ replay: dlqIds }))).done);
  }

  /** Removes the chosen dead letters without replaying them and returns how many it removed. */
  async purge(queue: string, dlqIds: string[]): Promise<number> {
    if (dlqIds.length === 0) return 0;
    return num((await this.call("dlq", queue, JSON.stringify({ purge: dlqIds }))).done);
  }

  /**
   * Moves a group's cursors (on every partition, or one) to the start, the
   * end or a time, ends its leases there, and returns how many cursors moved.
   */
  async seek(queue: string, opts: SeekOptions): Promise<number> {
    const body: Obj = { to: timeArg(opts.to) };
    if (opts.group) body.group = opts.group;
    if (opts.partition) body.partition = opts.partition;
    return num((await this.call("seek", queue, JSON.stringify(body))).moved);
  }

  /**
   * Runs the consumer loop on a queue until opts.signal aborts, calling
   * handler once per message; see ConsumeOptions and the README.
   */
  consume(queue: string, handler: Handler, opts: ConsumeOptions = {}): Promise<void> {
    return consume(this, queue, handler, opts);
  }

  /** Sends a request and parses its reply with JSON.parse. */
  private async call(verb: string, queue: string, body: Uint8Array | string, o: RequestOpts = {}): Promise<Obj> {
    const op = verb === "list" ? "list" : `${verb} ${queue}`;
    const msg = await this.request(verb, queue, body, o);
    try {
      const v: unknown = JSON.parse(strictUTF8.decode(msg.data));
      if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("not a JSON object");
      return v as Obj;
    } catch (e) {
      throw new Error(`comb: ${op}: decode reply: ${(e as Error).message}`, { cause: e });
    }
  }

  /**
   * Sends one request on <prefix>.<verb>.<queue> and returns the reply,
   * throwing a CombError for an error reply and a TransportError when no
   * reply came.
   */
  async request(verb: string, queue: string, body: Uint8Array | string, o: RequestOpts = {}): Promise<Msg> {
    let op = verb;
    let subject = `${this.prefix}.${verb}`;
    if (verb !== "list") {
      op = `${verb} ${queue}`;
      checkQueue(op, queue);
      subject += `.${queue}`;
    }
    const timeout = this.timeoutMs + (o.extraMs ?? 0);
    const payload = typeof body === "string" ? utf8.encode(body) : body;
    let msg: Msg;
    try {
      o.signal?.throwIfAborted();
      const req = this.nc.request(subject, payload, o.headers ? { timeout, headers: o.headers } : { timeout });
      msg = await (o.signal ? abortable(req, o.signal) : req);
    } catch (e) {
      if (o.signal?.aborted && e === o.signal.reason) throw e;
      throw transportError(e, op, subject, timeout);
    }
    const code = msg.headers?.get(Header.ErrorCode, Match.IgnoreCase);
    if (code) throw replyError(code, msg, op);
    return msg;
  }
}

/** Per-request options of Client.request. */
export interface RequestOpts {
  headers?: MsgHdrs | undefined;
  /** Added to the client's timeout: a pop's long poll. */
  extraMs?: number;
  signal?: AbortSignal | undefined;
}

function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

function transportError(e: unknown, op: string, subject: string, timeout: number): TransportError {
  const chain: unknown[] = [];
  for (let c: unknown = e; c instanceof Error && chain.length < 5; c = c.cause) chain.push(c);
  const is = (cls: new (...a: never[]) => Error) => chain.some((c) => c instanceof cls);
  if (is(natsErrors.NoRespondersError) || (e instanceof natsErrors.RequestError && e.isNoResponders())) {
    return new TransportError("noResponders", `comb: ${op}: no Comb service listens on ${subject}`, e);
  }
  if (is(natsErrors.TimeoutError)) {
    return new TransportError("timeout", `comb: ${op}: no reply within ${timeout} ms`, e);
  }
  return new TransportError("connection", `comb: ${op}: ${(e as Error)?.message ?? String(e)}`, e);
}

/** The CombError of an error reply; the body's message wins over the header's, which is single-line. */
function replyError(code: string, msg: Msg, op: string): CombError {
  let message = msg.headers?.get(Header.Error, Match.IgnoreCase) ?? "";
  const n = Number(code);
  if (!Number.isInteger(n)) {
    return new CombError(Code.Internal, `malformed error code ${JSON.stringify(code)}: ${message}`, op);
  }
  let retryAfterMs: number | undefined;
  const ra = Number(msg.headers?.get(Header.RetryAfterMs, Match.IgnoreCase) ?? "");
  if (Number.isInteger(ra) && ra > 0) retryAfterMs = ra;
  try {
    const body = JSON.parse(new TextDecoder().decode(msg.data)) as { error?: { message?: unknown; retry_after_ms?: unknown } };
    if (typeof body.error?.message === "string" && body.error.message) message = body.error.message;
    if (retryAfterMs === undefined && typeof body.error?.retry_after_ms === "number" && body.error.retry_after_ms > 0) {
      retryAfterMs = body.error.retry_after_ms;
    }
  } catch {
    // The headers alone are the error.
  }
  return new CombError(n, message || `error ${code}`, op, retryAfterMs);
}

/**
 * checkQueue refuses names that cannot form a subject, so that they fail as
 * a 400 like any other bad name rather than with a NATS protocol error. The
 * service checks the finer rules, so that a name it accepts is never refused
 * by an older client.
 */
function checkQueue(op: string, queue: string): void {
  if (queue === "") throw badRequest(op, "empty queue name");
  if (/[ \t\r\n*>]/.test(queue) || queue.startsWith(".") || queue.endsWith(".") || queue.includes("..")) {
    throw badRequest(op, `bad queue name ${JSON.stringify(queue)}`);
  }
}

function decodeRaw(msg: Msg, op: string): { [k: string]: Value } {
  try {
    return parseReply(strictUTF8.decode(msg.data));
  } catch (e) {
    throw new Error(`comb: ${op}: decode reply: ${(e as Error).message}`, { cause: e });
  }
}

/** headersOf reads a reply's "headers": every value an array of strings. */
function headersOf(v: unknown): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  if (v === undefined || v === null) return out;
  if (typeof v !== "object" || Array.isArray(v)) throw new Error("headers: not an object");
  for (const [k, vs] of Object.entries(v as Record<string, unknown>)) {
    if (!Array.isArray(vs) || !vs.every((x) => typeof x === "string")) throw new Error(`headers.${k}: not an array of strings`);
    out[k] = vs as string[];
  }
  return out;
}

function pushResults(rep: Obj, n: number, op: string): PushResult[] {
  const res = list(rep, "results", op);
  if (res.length !== n) throw new Error(`comb: ${op}: ${res.length} results for ${n} messages`);
  return res.map((r) => {
    const out: PushResult = { partition: str(r.partition), status: str(r.status) };
    if (typeof r.offset === "number") out.offset = r.offset;
    return out;
  });
}

function queueConfig(r: Obj): QueueConfig {
  const out = {} as Record<keyof QueueConfig, number | boolean>;
  for (const [k, wire] of Object.entries(configWireNames) as [keyof QueueConfig, string][]) {
    out[k] = k === "deadLetter" ? r[wire] === true : num(r[wire]);
  }
  return out as unknown as QueueConfig;
}

/** A time argument on the wire: RFC 3339 for a Date, else the string as given. */
function timeArg(t: From | Date): string {
  return t instanceof Date ? t.toISOString() : t;
}

function list(r: Obj | { [k: string]: Value }, key: string, op: string): Obj[] {
  const v = (r as Obj)[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new Error(`comb: ${op}: decode reply: ${key} is not an array`);
  return v as Obj[];
}

function pageBody(q: PageQuery): string {
  const body: Obj = {};
  if (q.limit) body.limit = q.limit;
  if (q.after) body.after = q.after;
  return JSON.stringify(body);
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function num(v: unknown): number {
  return typeof v === "number" ? v : 0;
}

/** The wire form of an ack, in an ack request or a pop that carries acks. */
function ackBody(a: Ack): Obj {
  const w: Obj = {};
  if (a.partition) w.partition = a.partition;
  w.offset = a.offset;
  w.lease = a.lease;
  if (a.status) w.status = a.status;
  return w;
}

/** The results of n acks, checked for their count. */
function ackResults(res: Obj[], n: number, op: string): AckResult[] {
  if (res.length !== n) {
    throw new Error(`comb: ${op}: ${res.length} results for ${n} acks`);
  }
  return res.map((r) => (r.ok === true ? { ok: true } : { ok: false, error: str(r.error) || "ack refused" }));
}
