// Package pipeline is the operator API: what a step of a pipeline is
// (Definition, Operator), what it works on (Record, Value), what it sees
// while it runs (Context), how it is built from its YAML (Spec, Factory)
// and how its kind is made known (Registry). The built-in operators
// (package ops) are written against this API alone, as a user's own are;
// the engine that runs them lives elsewhere (package runner is its front
// door).
package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/pipeline-run/pipeline/pipeline/state"
)

// TaskID names a task: the source partition number it processes. With
// several source topics, the same partition number of each is one task
// (co-partitioning, as Kafka Streams does).
type TaskID int32

// Operator processes the records of one task. Each task has its own
// instance, used from one goroutine at a time, so an operator needs no
// locks for its own fields. Process may change r in place and emit it; an
// operator that emits several records from one must emit clones.
//
// An error returned by Process fails the input record r derives from: it
// goes to the dead-letter topic, or stops the pipeline when there is none.
type Operator interface {
	Process(ctx Context, r *Record) error
}

// Flusher is an Operator that holds records back (a batch, a window) and
// must release them at a checkpoint barrier, before anything commits.
type Flusher interface {
	Flush(ctx Context) error
}

// Closer is an Operator with resources to release when its task closes.
type Closer interface {
	Close() error
}

// Context is what an operator sees while it processes a record or
// flushes: where to emit, which task and input it runs in, an expression
// evaluator and a logger of its own.
//
// It is a context.Context too, done when the operator's task stops (its
// partitions were revoked, or the pipeline is shutting down and the grace
// period is over): an operator that calls out (HTTP, a database) passes it
// on, so that a stuck call does not hold the pipeline. A Context is valid
// only during the call it is passed to.
type Context interface {
	context.Context
	// Task returns the task the record belongs to.
	Task() TaskID
	// Input returns which of the step's inputs (its from list) the record
	// arrived on.
	Input() int
	// Eval returns the operator instance's expression evaluator.
	Eval() *Evaluator
	// Logger returns a logger naming the step and the task.
	Logger() *slog.Logger
	// Watermark returns the event-time watermark of a stateful
	// operator's input in this task: records with an earlier event time
	// are late. It is the zero time until every input partition has said
	// where it is, for stateless operators, and in a graph where no step
	// uses event time (EventTimeUser) and no source configures it.
	Watermark() time.Time
	// Now returns the processing time: the clock processing-time timers
	// follow.
	Now() time.Time
	// DropLate counts r as late data that the operator drops (it came
	// after its window closed and no late output takes it): the engine
	// counts it (Stats.LateRecords) and logs it, at most once a second,
	// with where it was read. Nothing is lost silently.
	DropLate(r *Record)
	// Emit sends r to the step's default output.
	Emit(r *Record)
	// EmitTo sends r to the named output. Emitting to an output the
	// operator's Definition does not list is a programming error and
	// drops r.
	EmitTo(output string, r *Record)
}

// TimerHandler is an Operator with timers (state.Timers, registered in
// NewStatefulOperator). The engine calls OnTimer for every timer that
// fires, in time order, from the task's goroutine like Process: event-time
// timers once the watermark reaches their time, processing-time timers
// once the wall clock does (checked at every checkpoint barrier). A fired
// timer is removed; what OnTimer emits is part of the open checkpoint, and
// an error stops the pipeline (there is no input record to send to the
// dead-letter topic).
type TimerHandler interface {
	OnTimer(ctx Context, t state.Timer) error
}

// EventTimeUser is a Definition whose operators use event time
// (Context.Watermark, event-time timers). The engine tracks watermarks
// only in a graph with such a step or a source that configures event_time.
type EventTimeUser interface {
	UsesEventTime() bool
}

// Forgetter is a Definition whose operators keep nothing of a record once
// Process returns: not the record, nor its Key or Value (a copy of a
// Value shares its memory), nor what Evaluator.EvalValue returned for it.
// They read it, change it, emit it and let go. In a graph whose steps all
// say so, the engine reuses the memory of the records it reads, and of
// the values EvalValue builds, batch after batch, rather than leave each
// batch's to the garbage collector. An operator that says so and keeps a
// record sees it change under it.
type Forgetter interface {
	KeepsNoRecords() bool
}

// InputForgetter is a Forgetter whose operators also keep no byte of what
// a record was read from once Process returns: not its key, value or
// headers as read (a copy made with CopyWithoutValue shares them, and so
// do the []byte of a value or key in the bytes format), nor a value
// holding them. Whatever they emit of a record, they emit before
// Process returns. In a graph whose steps all say so, the engine hands
// the memory the client fetched records into back to the client for the
// next fetch, once the records written of them are acknowledged: an
// operator that says so and keeps such bytes sees them change under it.
type InputForgetter interface {
	Forgetter
	KeepsNoInput() bool
}

// Definition is an operator as configured: built once from its YAML spec,
// it makes one Operator per task.
type Definition interface {
	// Outputs lists the named outputs besides the default one. A step
	// named s with output o is read as "s.o".
	Outputs() []string
	// NewOperator returns the operator instance for one task.
	NewOperator(task TaskID) (Operator, error)
}

// StatefulDefinition is a Definition whose operators keep keyed state. The
// engine gives each task's operator a state.Store, writes the store's
// changes to the step's changelog topic (one partition per task) inside
// every checkpoint's transaction, commits or aborts them with it, and
// restores the store from the changelog before the task processes anything.
//
// State is per task, and a task is a partition number: an operator must only
// keep state for keys whose records all reach the same task, that is for
// the keys the input is partitioned by (the source's, or a key_by step's).
// The engine refuses a stateful step whose input was re-keyed by a step
// that says so (KeyChanger) without a key_by in between.
type StatefulDefinition interface {
	Definition
	// Fingerprint identifies what the state means. The engine adds where
	// the records' key comes from, and state written under another
	// fingerprint is refused at start-up rather than misread.
	Fingerprint() string
	// NewStatefulOperator returns the operator of one task, over its
	// store. It registers every state the operator uses (state.NewValue
	// and the like) and does not read them yet: the engine restores the
	// store from its changelog after it returns, checking each record
	// against the state it belongs to.
	NewStatefulOperator(task TaskID, st *state.Store) (Operator, error)
}

// KeyChanger is a Definition that may give records a new key (a map with a
// key expression). Records it re-keys are no longer partitioned by their
// key, so keyed state downstream needs a key_by first; the engine checks
// that with ChangesKeys.
type KeyChanger interface {
	ChangesKeys() bool
}

// Merger is a Definition whose output records may each stand for several
// input records (an aggregate emitting once per checkpoint, a window), so
// that no single source position is theirs. audit.source_positions
// refuses a graph with a step that merges, naming what MergesInputs says.
type Merger interface {
	// MergesInputs returns, when the step's outputs merge inputs, the
	// sub-path of its spec that makes it so (such as ".emit"), what it
	// does ("emit: checkpoint writes one record for many inputs") and
	// what to change instead ("use emit: update"); sub is "" when they
	// do not merge.
	MergesInputs() (sub, what, instead string)
}
