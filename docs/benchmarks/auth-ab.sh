#!/usr/bin/env bash
# The cost of authentication and tenancy: one revision, back to back, with
# no authentication (A) and with one tenant account whose user the loader
# logs in as (B), which also gives every user Comb's subject denials.
#   docs/benchmarks/auth-ab.sh [REV] [runs per side] [-- loadtest flags]
# REV defaults to HEAD; the flags default to ab.sh's closed-loop shape.
set -euo pipefail
rev=${1:-HEAD}
[ $# -gt 0 ] && shift
top=$(git rev-parse --show-toplevel)
conf=$(mktemp -t comb-auth.XXXXXX.conf)
chmod 644 "$conf"
cat >"$conf" <<'CONF'
accounts {
  LOAD: { users: [ { user: load, password: load-secret } ] }
}
CONF
rev=$(git -C "$top" rev-parse --short "$rev")
B_CONFIG=$conf B_AUTH=load:load-secret OUT=${OUT:-$top/out/auth-ab} exec "$top/docs/benchmarks/ab.sh" "$rev" "$rev" "$@"
