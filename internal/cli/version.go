package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time: -ldflags "-X github.com/combmq/comb/internal/cli.version=v1.0.0".
var version string

func init() {
	Register(Command{Name: "version", Summary: "print the version and exit", Run: runVersion})
}

// Version returns the version of this build: the one set at link time,
// else the module version and VCS revision Go recorded, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	v := "dev"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		v = mv
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

func runVersion(_ context.Context, env Env, args []string) int {
	fs := newFlagSet("version", "Print the version and exit.", env.Stderr)
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	fmt.Fprintf(env.Stdout, "comb %s (%s %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
