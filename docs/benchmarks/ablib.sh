# Sourced by ab.sh and scale-ab.sh: what their A/B runs share.

# ab_parse_args BASE NEW [runs] [-- rest…] sets base, new, runs (default
# $ab_runs, else 2) and rest (an array, what follows "--").
ab_parse_args() {
	base=$1 new=$2
	shift 2
	runs=${ab_runs:-2}
	if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
	[ "${1:-}" = "--" ] && shift
	rest=("$@")
}

# ab_build OUT REV [cmd/dir out-name]… builds REV's ./cmd/comb as
# OUT/comb-REV from a worktree, and each further package of that tree as
# OUT/name.
ab_build() {
	local out=$1 rev=$2 top dir
	shift 2
	top=$(git rev-parse --show-toplevel)
	dir=$(mktemp -d -t comb-ab.XXXXXX)
	git -C "$top" worktree add -q --detach "$dir" "$rev"
	(cd "$dir" && go build -o "$out/comb-$rev" ./cmd/comb)
	while [ $# -ge 2 ]; do
		(cd "$dir" && go build -o "$out/$2" "$1")
		shift 2
	done
	git -C "$top" worktree remove --force "$dir"
}

# ab_wait_ready LOG PID NAME waits up to 60 s for `comb serve`'s ready
# line in LOG, and exits, showing the log, if it does not come.
ab_wait_ready() {
	local log=$1 pid=$2 name=$3
	for _ in $(seq 300); do grep -q 'comb ready' "$log" && break; sleep 0.2; done
	grep -q 'comb ready' "$log" || { echo "serve $name did not start"; cat "$log"; kill "$pid"; exit 1; }
}
