// Package loadtest is Comb's soak loader, a library behind `comb
// loadtest`.
//
// It mirrors the reference soak's loader: an open-loop producer that sends
// push requests on a fixed schedule spread over pacer goroutines (a request
// due while MaxInflight are unanswered is shed and counted, never silently
// dropped), closed-loop consumers in one group that pop under leases and
// ack asynchronously with a bound on acks in flight, and end-to-end latency
// measured from each message's scheduled send time into HdrHistograms, so a
// stalled broker cannot hide behind a loader that waited for it.
//
// Every message carries a 40-byte header (run, producer, partition,
// sequence, scheduled send time and its stream's floor; see payload.go),
// padded to Config.Payload bytes, so that consumers can measure latency
// and, with Config.Verify, account for every message: see verify.go for
// exactly what counts as missing, duplicate or out of order.
//
// A ticker samples once a second (the loader's counters and latency, the
// broker's and PostgreSQL's resources; see sampler.go), in open loop half a
// push interval after the second so that its reads do not run beside the
// push due then, prints one line per Config.Interval, and with
// Config.OutDir writes samples.csv and intervals.csv as it goes, then
// summary.json and a six-panel report.png; with Config.PushLog also
// pushes.csv, the times of every push request (pushlog.go).
//
// Config.DedupWindow turns deduplication on: the queue's window is set and
// every message carries a producer id of its own, so a run measures what
// the id lookups cost without any message being a duplicate.
//
// TargetJetStream runs the same workload against an embedded NATS
// JetStream, so one run can print Comb's figures and JetStream's side by
// side.
package loadtest
