// Error replies of the Comb service, and the errors of the consume loop.

/** Wire error codes (docs/protocol.md, "Errors"); they follow HTTP's meanings. */
export const Code = {
  /** The request is wrong: malformed JSON, an unknown field, a bad name, a value out of range. */
  BadRequest: 400,
  /** The queue does not exist. */
  NotFound: 404,
  /** A lease conflict the whole request depends on. */
  Conflict: 409,
  /** A message or request over a size limit. */
  TooLarge: 413,
  /** A queue limit or a tenant's quota is reached, or the broker is overloaded: retry later. */
  TooMany: 429,
  /** A bug in Comb; the message carries the request id it was logged under. */
  Internal: 500,
  /** PostgreSQL is unreachable or too slow, or the broker is stopping: retry later. */
  Unavailable: 503,
} as const;

/** Header names of error replies and of a put. */
export const Header = {
  /** The error code of an error reply (the NATS micro framework's header). */
  ErrorCode: "Nats-Service-Error-Code",
  /** The error message of an error reply (the NATS micro framework's header). */
  Error: "Nats-Service-Error",
  /** Whole milliseconds after which a refused request may succeed (tenant quotas). */
  RetryAfterMs: "Comb-Retry-After-Ms",
  /** The partition of a put. */
  Partition: "Comb-Partition",
  /** The producer id of a put. */
  Id: "Comb-Id",
  /** Holds a put's message back this many milliseconds. */
  DelayMs: "Comb-Delay-Ms",
  /** Holds a put's message back until this RFC 3339 time. */
  NotBefore: "Comb-Not-Before",
} as const;

/**
 * An error reply of the Comb service: the request reached the service and
 * was refused. `code` is the wire code (the Nats-Service-Error-Code header),
 * `message` the service's explanation, meant to be shown to whoever wrote
 * the request. Requests the client refuses to send (an empty queue name, an
 * unknown setting) fail with a CombError of code 400 too.
 */
export class CombError extends Error {
  /** The wire code, e.g. 404. */
  readonly code: number;
  /** When the same request may succeed, in ms from the reply (429 of a tenant's quota); else undefined. */
  readonly retryAfterMs: number | undefined;
  /** The operation that failed, e.g. "pop orders". */
  readonly op: string;

  constructor(code: number, message: string, op = "", retryAfterMs?: number) {
    super(message);
    this.name = "CombError";
    this.code = code;
    this.op = op;
    this.retryAfterMs = retryAfterMs;
  }

  /** Whether the same request may succeed later without change: 429 and 503. */
  get temporary(): boolean {
    return this.code === Code.TooMany || this.code === Code.Unavailable;
  }

  override toString(): string {
    const where = this.op ? `comb: ${this.op}: ` : "comb: ";
    return `${this.name}: ${where}${this.message} (${this.code})`;
  }
}

/** Whether err is a CombError, optionally of the given code. */
export function isCombError(err: unknown, code?: number): err is CombError {
  return err instanceof CombError && (code === undefined || err.code === code);
}

/**
 * A request that got no answer from the service: no broker serves the
 * subject (`kind` "noResponders"), no reply came in time ("timeout"), or the
 * connection failed ("connection"). The nats.js error is the `cause`.
 */
export class TransportError extends Error {
  readonly kind: "noResponders" | "timeout" | "connection";

  constructor(kind: TransportError["kind"], message: string, cause: unknown) {
    super(message, { cause });
    this.name = "TransportError";
    this.kind = kind;
  }
}

/**
 * Thrown by `consume` when acks were still unanswered after its
 * `drainTimeoutMs`. Their messages are delivered again if the acks were lost.
 */
export class DrainTimeoutError extends Error {
  /** How many ack requests were still in flight. */
  readonly inFlight: number;

  constructor(queue: string, inFlight: number) {
    super(`comb: consume ${queue}: ${inFlight} ack request(s) still in flight when consume stopped`);
    this.name = "DrainTimeoutError";
    this.inFlight = inFlight;
  }
}

/** The message of a CombError that a client makes for a request it will not send. */
export function badRequest(op: string, message: string): CombError {
  return new CombError(Code.BadRequest, message, op);
}
