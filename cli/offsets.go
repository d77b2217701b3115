package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/pipeline-run/pipeline/offsets"
	"github.com/twmb/franz-go/pkg/kadm"
)

func (e *env) offsets(ctx context.Context, args []string) error {
	return e.group(ctx, "offsets", args, []subcommand{
		{"show", "offsets show -c FILE [--format text|json]", "Prints the group's committed offset, the end and the lag of each partition the\npipeline reads.", e.offsetsShow},
		{"reset", "offsets reset -c FILE --to earliest|latest", "Moves the group's committed offsets of every source topic to its start or end.\nStop every instance first, and wait consumer.session_timeout.", e.offsetsReset},
	})
}

func (e *env) offsetsReset(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	to := fs.String("to", "", "where to move the offsets: earliest or latest")
	if err := fs.parse(args); err != nil {
		return err
	}
	var rt offsets.ResetTo
	switch *to {
	case "earliest":
		rt = offsets.ToStart
	case "latest":
		rt = offsets.ToEnd
	default:
		return usagef("offsets reset: --to must be earliest or latest, found %q", *to)
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	adm, err := e.adminFor(cfg)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	os, err := offsets.Reset(ctx, adm, cfg.Group, rt, g.SourceTopics()...)
	if err != nil {
		return err
	}
	os.Each(func(o kadm.Offset) {
		fmt.Fprintf(e.stdout, "%s/%d -> %d\n", o.Topic, o.Partition, o.At)
	})
	return nil
}

func (e *env) offsetsShow(ctx context.Context, fs *command, args []string) error {
	path := fs.String("c", "", "the pipeline's YAML `file`")
	format := fs.formatFlag()
	if err := fs.parse(args); err != nil {
		return err
	}
	asJSON, err := jsonFormat(*format)
	if err != nil {
		return err
	}
	cfg, g, err := e.loadConfig(*path)
	if err != nil {
		return err
	}
	cl, err := e.clientFor(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lags, err := offsets.Describe(ctx, cl, cfg.Group, g.SourceTopics()...)
	if asJSON {
		out := offsetsJSON{Group: cfg.Group, Partitions: []partitionLag{}}
		for _, l := range lags {
			p := partitionLag{Topic: l.Topic, Partition: l.Partition, End: l.End, Lag: l.Lag}
			if l.Committed >= 0 {
				p.Committed = &l.Committed
			}
			out.Partitions = append(out.Partitions, p)
		}
		if werr := e.writeJSON(out); werr != nil {
			return werr
		}
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\n")
	for _, l := range lags {
		c := fmt.Sprint(l.Committed)
		if l.Committed < 0 {
			c = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", l.Topic, l.Partition, c, l.End, l.Lag)
	}
	tw.Flush()
	return err
}

// offsetsJSON is offsets show's JSON output.
type offsetsJSON struct {
	Group      string         `json:"group"`
	Partitions []partitionLag `json:"partitions"`
}

type partitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed *int64 `json:"committed"` // null: the group has committed nothing here
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
}
