package cli

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestTheShippedBuild builds the binary as scripts/build.sh ships it and
// checks that it is static (no interpreter, no shared library) and that
// `pipeline version` names the commit it was built from and the Go
// release, not just "dev".
func TestTheShippedBuild(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("this test runs in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "pipeline")
	if out, err := exec.Command("sh", "../scripts/build.sh", bin).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("the binary is dynamically linked (program header %v)", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs shared libraries %v", libs)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	commit := strings.TrimSpace(string(head))
	if !strings.Contains(got, "(commit "+commit) || !strings.Contains(got, runtime.Version()) || strings.Contains(got, "built unknown") || strings.HasPrefix(got, "pipeline dev") {
		t.Fatalf("pipeline version printed %q; want a version, the commit %s, its time and %s", got, commit, runtime.Version())
	}
}
