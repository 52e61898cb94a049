package node

import (
	"log/slog"
	"testing"
)

// The pending-connection cap stays under half the open-file budget; an
// unknown budget (0) leaves it as configured.
func TestAPIConnLimitsWithinFileBudget(t *testing.T) {
	cfg := DefaultConfig()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		budget uint64
		want   int
	}{
		{1 << 20, cfg.MaxPendingConns},
		{2048, cfg.MaxPendingConns},
		{1024, 512},
		{1, 1},
		{0, cfg.MaxPendingConns},
	} {
		if got := apiConnLimits(cfg, tc.budget, log).MaxPending; got != tc.want {
			t.Errorf("budget %d: cap %d, want %d", tc.budget, got, tc.want)
		}
	}
	if b, err := fdBudget(); err != nil || b == 0 {
		t.Fatalf("fdBudget: %d %v", b, err)
	}
}
