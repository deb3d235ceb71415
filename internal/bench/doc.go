// Package bench holds ohd's benchmarks that compare a component with a
// same-run baseline; the ohd-bench command runs them and prints one line
// per result.
//
// Start at table.go (every benchmark's target and the table ohd-bench
// prints); each benchmark has its own file: broker.go, llm.go, proxy.go
// (with wrk.go, its lean client), create.go and publish.go (which start a
// real ohd, daemon.go), load.go (publish-load: publishing with 8 agents
// committing at once beside 20 idle containers, against one agent alone;
// create-parallel: 8 in-place creates at once against 8 worktree creates),
// gitrelay.go (git through the broker's git relay), gobench.go (the Go benchmarks under pkg/).
// sample.go holds the latency samples they share.
package bench
