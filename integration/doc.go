// Package integration holds the end-to-end tests of the pipeline binary
// against a real Kafka-protocol broker, and the harness they share: a broker
// provider (broker.go), control of child processes (process.go), an input
// generator (input.go) and the invariant checker (verify.go).
//
// One broker serves the whole package; TestMain picks it (see
// brokerProviders) and prints its kind, version and address. Every test
// uses its own topics and consumer group, so tests never see each other's
// data even on a long-lived external broker.
//
// Environment:
//
//	KAFKA_BOOTSTRAP=host:port[,...]  run against this broker instead of starting one
//	INTEGRATION_NO_BINARY=1           do not build cmd/pipeline; process tests then fail,
//	                                  checker tests (in-process kfake) still run
//	E2E_SEED=N                        replay the random fault schedule of a failed run
//	E2E_LOG_DIR=DIR                   keep process logs there instead of in a temp dir
package integration
