// @combmq/comb: a client for Comb, a partitioned message queue persisted in
// PostgreSQL that speaks NATS. See README.md and docs/protocol.md.

export { Client, DefaultTimeoutMs, type ClientOptions, type RequestOpts } from "./client.js";
export {
  consume,
  DefaultAckInflight,
  DefaultConsumeWaitMs,
  newConsumeStats,
  type ConsumeOptions,
  type ConsumeStats,
  type Handler,
  type HandlerResult,
} from "./consume.js";
export { dataField, jsonText, type Data } from "./data.js";
export { Code, CombError, DrainTimeoutError, Header, isCombError, TransportError } from "./errors.js";
export * from "./types.js";
