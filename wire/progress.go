package wire

// Progress is the record every checkpoint writes to the audit topic inside
// its own transaction: what it consumed and what it wrote. Since it commits
// or aborts with the outputs, the committed progress records are an exact
// account of the pipeline's history, which `pipeline audit` checks against
// the topics themselves.
type Progress struct {
	Version    int              `json:"v"`
	Pipeline   string           `json:"pipeline"`
	Group      string           `json:"group"`
	Instance   string           `json:"instance"`
	Run        string           `json:"run"` // one process's run, so checkpoint ids are unique with it
	Checkpoint CheckpointID     `json:"checkpoint"`
	Time       int64            `json:"time"` // Unix milliseconds
	Inputs     []ProgressInput  `json:"inputs"`
	Outputs    []ProgressOutput `json:"outputs"`
}

// ProgressInput is the offsets of one input partition a checkpoint
// consumed, First to Last included.
type ProgressInput struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	First     int64  `json:"first"`
	Last      int64  `json:"last"`
}

// ProgressOutput is how many records a checkpoint wrote to one partition
// (the dead-letter topic included; the progress record itself not).
type ProgressOutput struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Records   int64  `json:"records"`
}

// ProgressVersion is the format of Progress records.
const ProgressVersion = 1
