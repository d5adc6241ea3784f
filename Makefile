# The same test command as .ci/run and the README.
.PHONY: test ci
test:
	go test -race -count=1 -timeout 12m ./...

# Everything CI runs: PostgreSQL check, vet, gofmt, tests.
ci:
	.ci/run
