package redistier

import (
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

func TestStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	runContractSuite(t, suiteTarget{
		endpoints: []string{srv.Addr()},
		store:     standaloneStore{srv.Client()},
	})
}
