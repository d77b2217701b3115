package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/pipeline-run/pipeline/config"
)

// command is one command's flags and help. Its help goes to stdout when
// asked for (-h, --help), and a bad flag is a usage error that says how
// to get it.
type command struct {
	*flag.FlagSet
	e        *env
	synopsis string // after "pipeline ": "offsets show -c FILE"
	about    string
}

func (e *env) command(name, synopsis, about string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors; help prints the flags
	fs.Usage = func() {}
	return &command{FlagSet: fs, e: e, synopsis: synopsis, about: about}
}

// help prints the command's usage, what it does and its flags.
func (c *command) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: pipeline %s\n\n%s\n", c.synopsis, c.about)
	n := 0
	c.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		c.SetOutput(w)
		c.PrintDefaults()
		c.SetOutput(io.Discard)
	}
}

// parse parses args. -h prints the help and returns flag.ErrHelp, which
// exits 0; anything else wrong is a usage error.
func (c *command) parse(args []string) error {
	if err := c.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help(c.e.stdout)
			return err
		}
		return usagef("%s: %v (see pipeline %s -h)", c.Name(), err, c.Name())
	}
	if c.NArg() > 0 {
		return usagef("%s: unexpected argument %q (see pipeline %s -h)", c.Name(), c.Arg(0), c.Name())
	}
	return nil
}

// duration adds a duration flag read as the configuration reads
// durations (config.ParseDuration): "30s", not a bare number.
func (c *command) duration(name string, def time.Duration, usage string) *time.Duration {
	d := def
	c.Var((*durationValue)(&d), name, usage)
	return &d
}

type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// parseArgs is parse for a command that takes arguments besides its
// flags, in any order: `topics create input --partitions 3`.
func (c *command) parseArgs(args []string) ([]string, error) {
	var rest []string
	for {
		if err := c.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.help(c.e.stdout)
				return nil, err
			}
			return nil, usagef("%s: %v (see pipeline %s -h)", c.Name(), err, c.Name())
		}
		if c.NArg() == 0 {
			return rest, nil
		}
		rest = append(rest, c.Arg(0))
		args = c.Args()[1:]
	}
}

// repeated is a flag that may be given several times, each name=value.
type repeated struct {
	flag string
	kv   map[string]string
}

func (c *command) keyValues(name, usage string) map[string]string {
	r := &repeated{flag: name, kv: map[string]string{}}
	c.Var(r, name, usage)
	return r.kv
}

func (r *repeated) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, found %q", s)
	}
	r.kv[k] = v
	return nil
}

func (r *repeated) String() string { return "" }

// subcommand is one of a group's commands, such as offsets show.
type subcommand struct {
	name     string
	synopsis string // after "pipeline "
	about    string
	run      func(ctx context.Context, c *command, args []string) error
}

// group runs the subcommand args name, or prints the group's help: on
// stdout with exit 0 when asked for, on stderr with a usage error when
// the subcommand is missing or unknown.
func (e *env) group(ctx context.Context, name string, args []string, subs []subcommand) error {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	help := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, s := range subs {
			fmt.Fprintf(w, "  pipeline %s\n      %s\n", s.synopsis, strings.ReplaceAll(s.about, "\n", "\n      "))
		}
		fmt.Fprintf(w, "\n`pipeline %s SUBCOMMAND -h` lists a subcommand's flags.\n", name)
	}
	if len(args) == 0 {
		help(e.stderr)
		return usagef("%s: a subcommand is required: %s", name, orList(names))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		help(e.stdout)
		return nil
	}
	i := slices.IndexFunc(subs, func(s subcommand) bool { return s.name == args[0] })
	if i < 0 {
		help(e.stderr)
		return usagef("%s: unknown subcommand %q; want %s", name, args[0], orList(names))
	}
	s := subs[i]
	return s.run(ctx, e.command(name+" "+s.name, s.synopsis, s.about), args[1:])
}

// orList formats choices for messages: "a, b or c".
func orList(choices []string) string { return joinList(choices, "or") }

// andList formats items for messages: "a, b and c".
func andList(items []string) string { return joinList(items, "and") }

func joinList(xs []string, word string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " " + word + " " + xs[len(xs)-1]
}

// count says n things: "1 record", "3 records".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// logLevels are the levels --log-level and log.level take.
var logLevels = []string{"debug", "info", "warn", "error"}

// checkLevel makes a --log-level that names no level a usage error; ""
// is no override.
func checkLevel(level string) error {
	if level == "" || slices.Contains(logLevels, strings.ToLower(level)) {
		return nil
	}
	return usagef("--log-level %q: must be one of %s", level, orList(logLevels))
}
