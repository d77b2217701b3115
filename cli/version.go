package cli

import (
	"runtime"
	"runtime/debug"
)

// build describes this binary: its version, the commit it was built from
// and when, and the Go release that built it.
type build struct {
	Version, Commit, Date, Go string
}

// buildInfo reads what the Go toolchain recorded in the binary: the main
// module's version (a tagged `go install` gives v1.2.3; a build in a
// checkout, the pseudo-version or "(devel)") and, for a build in a git
// checkout, the commit, its time and whether the tree had changes. Version,
// when set with -ldflags, wins over the module version.
func buildInfo() build {
	b := build{Version: Version, Commit: "unknown", Date: "unknown", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Date = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && b.Commit != "unknown" {
		b.Commit += "-dirty"
	}
	return b
}

func (b build) String() string {
	return "pipeline " + b.Version + " (commit " + b.Commit + ", built " + b.Date + ", " + b.Go + ")"
}
