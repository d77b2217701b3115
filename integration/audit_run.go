package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// auditBound is how long one `pipeline audit` may take: it reads every
// input, output and progress record of the run.
const auditBound = 3 * time.Minute

// AuditResult is what one run of `pipeline audit` said.
type AuditResult struct {
	ExitCode int
	Output   string // stdout and stderr, as printed

	// From its summary line; zero when it printed none (it could not audit).
	Checkpoints   int
	InputRecords  int64
	OutputRecords int64
}

// Summary is the audit's one-line account, for logs.
func (a *AuditResult) Summary() string {
	return fmt.Sprintf("audit exit %d: %d committed checkpoints, %d input records, %d output records accounted for",
		a.ExitCode, a.Checkpoints, a.InputRecords, a.OutputRecords)
}

// auditSummary matches the line `pipeline audit` prints before its findings.
var auditSummary = regexp.MustCompile(`(?m)^.*: (\d+) committed checkpoints, (\d+) input records, (\d+) output records accounted for$`)

// RunAudit runs `bin audit -c cfgPath` and reports its exit status and
// output. An error means it could not be run or did not end in time; a
// failed audit is a result, with a non-zero ExitCode.
func RunAudit(ctx context.Context, bin, cfgPath string) (*AuditResult, error) {
	ctx, cancel := context.WithTimeout(ctx, auditBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "audit", "-c", cfgPath, "--timeout", auditBound.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	a := &AuditResult{Output: out.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("pipeline audit -c %s did not finish within %v:\n%s", cfgPath, auditBound, a.Output)
	case errors.As(err, &exit):
		a.ExitCode = exit.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("running pipeline audit -c %s: %w", cfgPath, err)
	}
	if m := auditSummary.FindStringSubmatch(a.Output); m != nil {
		a.Checkpoints, _ = strconv.Atoi(m[1])
		a.InputRecords, _ = strconv.ParseInt(m[2], 10, 64)
		a.OutputRecords, _ = strconv.ParseInt(m[3], 10, 64)
	}
	return a, nil
}

// auditFindings returns the lines of an audit's output that report a
// violation of check (e.g. "output-count"), as `pipeline audit` prints
// them: indented, the check's name first.
func auditFindings(a *AuditResult, check string) []string {
	var out []string
	for line := range strings.SplitSeq(a.Output, "\n") {
		if strings.HasPrefix(line, "  "+check+" ") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}
