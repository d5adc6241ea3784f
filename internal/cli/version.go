package cli

import (
	"context"
	"fmt"
	"runtime"

	"github.com/combmq/comb/internal/buildinfo"
)

func init() {
	Register(Command{Name: "version", Summary: "print the version and exit", Run: runVersion})
}

// Version returns the version of this build (see buildinfo.Version; the
// link-time variable is github.com/combmq/comb/internal/buildinfo.version).
func Version() string { return buildinfo.Version() }

func runVersion(_ context.Context, env Env, args []string) int {
	fs := newFlagSet("version", "Print the version and exit.", env.Stderr)
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	fmt.Fprintf(env.Stdout, "comb %s (%s %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
