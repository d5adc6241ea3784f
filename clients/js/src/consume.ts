// The consumer loop: long-polling pops, a handler per message, and one ack
// request per batch sent asynchronously, with a bound on ack requests in
// flight. It follows clients/go's Consume; see ConsumeOptions.

import type { Client } from "./client.js";
import { CombError, Code, DrainTimeoutError, TransportError } from "./errors.js";
import type { Ack, AckStatus, Delivery, From } from "./types.js";

/** Defaults of ConsumeOptions. */
export const DefaultAckInflight = 256;
export const DefaultConsumeWaitMs = 5_000;

/**
 * What a handler may return: nothing or "completed" settles the message;
 * "retry", "failed" or "dead" settle it so (see AckStatus). Throwing is
 * "failed", or "retry" once the consume signal has aborted.
 */
export type HandlerResult = AckStatus | void | undefined;

/** Processes one message; the signal aborts when consume stops. */
export type Handler = (msg: Delivery, signal: AbortSignal) => HandlerResult | Promise<HandlerResult>;

/** Live counters of a consume loop. */
export interface ConsumeStats {
  /** Messages delivered to the loop by pops. */
  popped: number;
  /** Messages settled as completed by an accepted ack. */
  completed: number;
  /** Accepted retry acks, each handing back its message and the rest of its lease (also those given back when stopping). */
  retried: number;
  /** Accepted failed acks, each handing back its message (attempt spent) and the rest of its lease. */
  failed: number;
  /** Messages dead-lettered by an accepted dead ack. */
  dead: number;
  /** Acks that failed or were refused. */
  ackErrors: number;
  /** Handler calls that threw or returned an unknown status. */
  handlerErrors: number;
  /** Pops that failed and were retried. */
  popErrors: number;
}

/** newConsumeStats returns zeroed counters, for ConsumeOptions.stats. */
export function newConsumeStats(): ConsumeStats {
  return { popped: 0, completed: 0, retried: 0, failed: 0, dead: 0, ackErrors: 0, handlerErrors: 0, popErrors: 0 };
}

/** Options of Client.consume; all optional. */
export interface ConsumeOptions {
  /** Stops the loop: it stops popping, gives back what it has not handled, waits for acks in flight and resolves. */
  signal?: AbortSignal;
  /** The consumer group; default "default". */
  group?: string;
  /** Most messages per pop; default the service's (100). */
  max?: number;
  /** Most partitions one pop spans; default 1. */
  partitions?: number;
  /** Each pop's long poll, ms; default 5000. */
  waitMs?: number;
  /** Lease time in ms, default the queue's: a whole batch must be handled and acked within it. */
  leaseMs?: number;
  /** Where the group starts on a partition it never read. */
  from?: From;
  /** Most ack requests sent and not yet answered; default 256. When reached, the pop loops wait: an ack is never dropped. */
  ackInflight?: number;
  /** Pop loops, each calling the handler with its own messages; default 1. */
  concurrency?: number;
  /** How long stopping waits for acks in flight, ms; default the client's timeout. */
  drainTimeoutMs?: number;
  /** Told about every ack that failed or was refused (an expired lease, typically); its messages are delivered again. */
  onAckError?: (err: Error) => void;
  /** Told about every pop that failed and will be retried after a backoff. */
  onPopError?: (err: Error) => void;
  /** Told about every handler call that threw (or returned an unknown status). */
  onHandlerError?: (err: unknown, msg: Delivery) => void;
  /** Updated as the loop runs. */
  stats?: ConsumeStats;
}

const statuses = new Set<string>(["completed", "retry", "failed", "dead"]);

// Backoff bounds of a failing pop loop, as in clients/go.
const popBackoffMinMs = 50;
const popBackoffMaxMs = 2_000;

/** One ack of a batch and what it settles when accepted. */
interface PlannedAck {
  ack: Ack;
  /** Messages before ack.offset (or up to it, for completed) that it completes. */
  completes: number;
}

/**
 * consume runs opts.concurrency pop loops on queue until opts.signal aborts.
 *
 * Each message goes to handler, in partition and offset order. After a
 * batch, the loop sends one ack request for it, asynchronously: per
 * (partition, lease) one cumulative "completed" ack at the last completed
 * offset, and at each message the handler settled otherwise an ack with its
 * status. After "retry" or "failed" the rest of that lease is delivered
 * again, so the loop does not hand it to the handler. At most ackInflight
 * ack requests are in flight; temporary failures (429, 503, no responders)
 * are retried twice, a timeout is not (the ack may have been applied).
 *
 * Pop errors are retried with a backoff, except a 400, which stops the loop
 * and rejects. On abort the loop stops popping, gives back (acks "retry")
 * messages it has not handled, waits up to drainTimeoutMs for the acks in
 * flight and resolves, or rejects with DrainTimeoutError.
 */
export async function consume(client: Client, queue: string, handler: Handler, opts: ConsumeOptions = {}): Promise<void> {
  if (typeof handler !== "function") {
    throw new CombError(Code.BadRequest, "the handler is not a function", `consume ${queue}`);
  }
  const c = new Consumer(client, queue, handler, opts);
  return c.run();
}

class Consumer {
  private readonly stop = new AbortController();
  private readonly inflight = new Set<Promise<void>>();
  private readonly stats: ConsumeStats;
  private readonly ackInflight: number;
  private fatal: unknown;

  constructor(
    private readonly client: Client,
    private readonly queue: string,
    private readonly handler: Handler,
    private readonly opts: ConsumeOptions,
  ) {
    this.stats = opts.stats ?? newConsumeStats();
    this.ackInflight = opts.ackInflight && opts.ackInflight > 0 ? opts.ackInflight : DefaultAckInflight;
  }

  async run(): Promise<void> {
    const outer = this.opts.signal;
    const onAbort = () => this.stop.abort(outer?.reason);
    if (outer?.aborted) onAbort();
    outer?.addEventListener("abort", onAbort, { once: true });
    try {
      const n = this.opts.concurrency && this.opts.concurrency > 0 ? this.opts.concurrency : 1;
      await Promise.all(Array.from({ length: n }, () => this.loop()));
    } finally {
      outer?.removeEventListener("abort", onAbort);
    }
    const drained = await this.drain(this.opts.drainTimeoutMs && this.opts.drainTimeoutMs > 0 ? this.opts.drainTimeoutMs : this.client.timeoutMs);
    if (this.fatal !== undefined) throw this.fatal;
    if (!drained) throw new DrainTimeoutError(this.queue, this.inflight.size);
  }

  private async loop(): Promise<void> {
    const signal = this.stop.signal;
    let backoff = 0;
    while (!signal.aborted) {
      const pop = this.client.pop(this.queue, {
        group: this.opts.group,
        max: this.opts.max,
        partitions: this.opts.partitions,
        waitMs: this.opts.waitMs && this.opts.waitMs > 0 ? this.opts.waitMs : DefaultConsumeWaitMs,
        leaseMs: this.opts.leaseMs,
        from: this.opts.from,
      });
      let batch: Delivery[];
      try {
        const r = await raceAbort(pop, signal);
        if (r === aborted) {
          // The pop goes on without us; give back whatever it leases, rather
          // than let its lease run out.
          pop.then((b) => this.giveBack(b)).catch(() => {});
          return;
        }
        batch = r;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof CombError && e.code === Code.BadRequest) {
          this.fatal ??= e;
          this.stop.abort(e);
          return;
        }
        this.stats.popErrors++;
        this.opts.onPopError?.(e as Error);
        backoff = Math.min(Math.max(2 * backoff, popBackoffMinMs), popBackoffMaxMs);
        await sleep(backoff, signal);
        continue;
      }
      backoff = 0;
      if (batch.length === 0) continue;
      this.stats.popped += batch.length;
      if (signal.aborted) {
        this.giveBack(batch);
        return;
      }
      await this.send(await this.handle(batch, signal));
    }
  }

  /** handle calls the handler on each message of batch and returns the acks that settle it. */
  private async handle(batch: Delivery[], signal: AbortSignal): Promise<PlannedAck[]> {
    interface LeaseState {
      partition: string;
      lease: string;
      pending: number; // completed since the last ack
      last: number; // offset of the last completed message
      stopped: boolean; // the rest of the lease is delivered again
    }
    const leases = new Map<string, LeaseState>();
    const plan: PlannedAck[] = [];
    for (const d of batch) {
      if (d.lease === "") continue; // auto-acked: nothing to settle
      const key = `${d.partition}\u0000${d.lease}`;
      let st = leases.get(key);
      if (st === undefined) {
        st = { partition: d.partition, lease: d.lease, pending: 0, last: -1, stopped: false };
        leases.set(key, st);
      }
      if (st.stopped) continue;
      const at = (status: AckStatus) => {
        plan.push({ ack: { partition: d.partition, lease: d.lease, offset: d.offset, status }, completes: st.pending });
        st.pending = 0;
      };
      if (signal.aborted) {
        at("retry"); // give back the rest of the lease, unhandled
        st.stopped = true;
        continue;
      }
      let status: AckStatus;
      try {
        const r = await this.handler(d, signal);
        if (r === undefined || r === null) {
          status = "completed";
        } else if (typeof r === "string" && statuses.has(r)) {
          status = r;
        } else {
          throw new TypeError(`comb: consume ${this.queue}: the handler returned ${JSON.stringify(r)}; want nothing, "completed", "retry", "failed" or "dead"`);
        }
      } catch (e) {
        this.stats.handlerErrors++;
        this.opts.onHandlerError?.(e, d);
        status = signal.aborted ? "retry" : "failed";
      }
      switch (status) {
        case "completed":
          st.pending++;
          st.last = d.offset;
          break;
        case "dead":
          at("dead"); // the lease goes on for the messages after it
          break;
        default:
          at(status);
          st.stopped = true;
      }
    }
    for (const st of leases.values()) {
      if (!st.stopped && st.pending > 0) {
        plan.push({ ack: { partition: st.partition, lease: st.lease, offset: st.last, status: "completed" }, completes: st.pending - 1 });
      }
    }
    return plan;
  }

  /** giveBack acks "retry" at the first offset of each lease of batch: none of it is settled. */
  private giveBack(batch: Delivery[]): void {
    const seen = new Set<string>();
    const plan: PlannedAck[] = [];
    for (const d of batch) {
      const key = `${d.partition}\u0000${d.lease}`;
      if (d.lease === "" || seen.has(key)) continue;
      seen.add(key);
      plan.push({ ack: { partition: d.partition, lease: d.lease, offset: d.offset, status: "retry" }, completes: 0 });
    }
    if (plan.length === 0) return;
    // Past the bound if need be: stopping must not wait for a slot.
    this.track(this.sendAck(plan));
  }

  /** send waits for a free in-flight slot, then sends plan's acks in one request without waiting for the reply. */
  private async send(plan: PlannedAck[]): Promise<void> {
    if (plan.length === 0) return;
    while (this.inflight.size >= this.ackInflight) {
      await Promise.race(this.inflight);
    }
    this.track(this.sendAck(plan));
  }

  private track(p: Promise<void>): void {
    const t: Promise<void> = p.finally(() => this.inflight.delete(t));
    this.inflight.add(t);
  }

  /** sendAck sends one ack request, retrying errors that prove it was not applied, and records the outcome. */
  private async sendAck(plan: PlannedAck[]): Promise<void> {
    const attempts = 3;
    for (let i = 0; ; i++) {
      try {
        const res = await this.client.ack(
          this.queue,
          this.opts.group,
          plan.map((p) => p.ack),
        );
        res.forEach((r, j) => this.record(plan[j]!, r.ok ? undefined : r.error ?? "ack refused"));
        return;
      } catch (e) {
        const temporary = (e instanceof CombError && e.temporary) || (e instanceof TransportError && e.kind === "noResponders");
        if (!temporary || i === attempts - 1) {
          for (const p of plan) this.record(p, e as Error);
          return;
        }
        await sleep((i + 1) * popBackoffMinMs);
      }
    }
  }

  private record(p: PlannedAck, err: string | Error | undefined): void {
    const a = p.ack;
    if (err !== undefined) {
      this.stats.ackErrors++;
      if (this.opts.onAckError) {
        const why = typeof err === "string" ? err : err.message;
        const e = new Error(`comb: ack ${this.queue} ${a.partition}/${a.offset} (${a.status}): ${why}`, typeof err === "string" ? undefined : { cause: err });
        this.opts.onAckError(e);
      }
      return;
    }
    this.stats.completed += p.completes;
    switch (a.status) {
      case "completed":
        this.stats.completed++;
        break;
      case "retry":
        this.stats.retried++;
        break;
      case "failed":
        this.stats.failed++;
        break;
      case "dead":
        this.stats.dead++;
        break;
    }
  }

  /** drain waits for the acks in flight, at most ms; false when some were still unanswered. */
  private async drain(ms: number): Promise<boolean> {
    if (this.inflight.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const all = (async () => {
      while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
      return true as const;
    })();
    try {
      return await Promise.race([all, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

const aborted = Symbol("aborted");

function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T | typeof aborted> {
  if (signal.aborted) return Promise.resolve(aborted);
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(aborted);
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

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
