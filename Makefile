# The test command of the README, and what .ci/run runs after installing
# what it needs: every Go test, then the JavaScript and the Python client's
# tests, each against real brokers. PYTHON must have pytest,
# pytest-asyncio and hypothesis (Debian's python3-* packages).
PYTHON ?= /usr/bin/python3

.PHONY: test test-go test-js test-python ci
test: test-go test-js test-python

test-go:
	go test -race -count=1 -timeout 12m ./...

test-js:
	cd clients/js && npm ci --no-audit --no-fund </dev/null && npm test </dev/null

test-python:
	$(PYTHON) -m pytest -q -p no:cacheprovider clients/python

# Everything CI runs: the installs, vet, gofmt, then make test.
ci:
	.ci/run
