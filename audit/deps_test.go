package audit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAuditLinksNoEngine keeps the auditor small: it reads what the
// pipeline wrote through the wire formats (package wire), and must not
// link the engine, the state stores or the expression language.
func TestAuditLinksNoEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), "github.com/pipeline-run/pipeline/wire") {
		t.Fatalf("go list -deps listed %d packages, without wire: %s", len(deps), out)
	}
	for _, d := range deps {
		for _, banned := range []string{"/internal/engine", "/pipeline/state", "cockroachdb/pebble", "expr-lang/expr"} {
			if strings.Contains(d, banned) {
				t.Errorf("audit links %s", d)
			}
		}
	}
}
