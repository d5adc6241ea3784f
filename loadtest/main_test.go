package loadtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/combmq/comb/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }
