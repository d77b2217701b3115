package cli

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionNamesTheCommit builds the binary as a checkout builds it and
// checks that `pipeline version` names the commit it was built from and
// the Go release, not just "dev".
func TestVersionNamesTheCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("this test runs in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "pipeline")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "../cmd/pipeline")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	commit := strings.TrimSpace(string(head))
	if !strings.Contains(got, "commit "+commit) || !strings.Contains(got, runtime.Version()) || strings.Contains(got, "built unknown") {
		t.Fatalf("pipeline version printed %q; want the commit %s, its time and %s", got, commit, runtime.Version())
	}
}
