// Command comb is the Comb broker and its tools; see `comb help`.
package main

import (
	"os"

	"github.com/combmq/comb/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
