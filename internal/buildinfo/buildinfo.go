// Package buildinfo says which build of Comb this is, for `comb version`
// and the status page.
package buildinfo

import "runtime/debug"

// version is set at link time: -ldflags "-X github.com/combmq/comb/internal/buildinfo.version=v1.0.0".
var version string

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
