// Command pipeline runs YAML-configured, exactly-once Kafka-to-Kafka
// stream-processing pipelines. See the README and docs/.
package main

import (
	"os"

	"github.com/pipeline-run/pipeline/cli"
	"github.com/pipeline-run/pipeline/pipeline/ops"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], ops.NewRegistry()))
}
