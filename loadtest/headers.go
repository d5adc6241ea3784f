package loadtest

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// loadHeaderName is the one header the loader gives messages with
// Config.Headers.
const loadHeaderName = "X-Load"

// loadHeaderValue returns the value of X-Load whose stored form,
// {"X-Load":["…"]}, is n bytes, or "" for n = 0.
func loadHeaderValue(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("h", n-minHeaders)
}

// loadHeaderJSON is the "headers" object of a push for n bytes of headers,
// nil for none: it is also exactly what the broker stores.
func loadHeaderJSON(n int) []byte {
	if n <= 0 {
		return nil
	}
	return []byte(`{"` + loadHeaderName + `":["` + loadHeaderValue(n) + `"]}`)
}

// loadHeader is the NATS header for n bytes of headers, nil for none.
func loadHeader(n int) nats.Header {
	if n <= 0 {
		return nil
	}
	return nats.Header{loadHeaderName: {loadHeaderValue(n)}}
}
