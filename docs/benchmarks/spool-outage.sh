#!/usr/bin/env bash
# The issue's 30 s PostgreSQL outage under load: TestPostgresStoppedSpools
# with COMB_FAULTTEST_OUTAGE_S (30 unless given), the same test CI runs
# with 10 s. Prints the test's report line: acknowledged, stored, spooled,
# lost, duplicates, order violations, the longest time without a
# successful push and the time to drain.
#
#   docs/benchmarks/spool-outage.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
COMB_FAULTTEST_OUTAGE_S="${1:-30}" go test -count=1 -timeout 5m -run '^TestPostgresStoppedSpools$' -v ./internal/faulttest/ |
	grep -E 'PostgreSQL stopped|^(--- |ok|FAIL)'
