// Package integration holds the end-to-end tests of the pipeline binary
// against a real Kafka-protocol broker, and the harness they share: broker
// providers (broker*.go), control of child processes (process.go), an input
// generator (input.go) and the invariant checker (verify.go).
//
// One broker serves the whole package; TestMain picks it (see
// brokerProviders) and prints its kind, version and address. Every test
// uses its own topics and consumer group, so tests never see each other's
// data even on a long-lived external broker.
//
// Environment (docs/brokers.md has the whole story):
//
//	KAFKA_BOOTSTRAP=host:port[,...]  run against this broker instead of starting one
//	KAFKA_LOCAL=1                     start Apache Kafka with scripts/kafka-local.sh (Java 17+,
//	                                  Maven once); missing prerequisites fail the run
//	INTEGRATION_NO_DOCKER=1           never start Kafka in Docker (testcontainers), even
//	                                  where a Docker engine answers
//	KAFKA_IMAGE=image:tag             the image testcontainers runs instead of kafkaImage
//	INTEGRATION_NO_BINARY=1           do not build cmd/pipeline; process tests then fail,
//	                                  checker tests (in-process kfake) still run
//	E2E_SEED=N                        replay the random fault schedule of a failed run
//	E2E_LOG_DIR=DIR                   keep process and broker logs there instead of in a temp dir
//	E2E_LOG_LEVEL=debug               the pipelines' log level (debug logs every Kafka request)
package integration
