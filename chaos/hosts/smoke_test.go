package hosts_test

import (
	"context"
	"testing"
	"time"

	"shoal/chaos/hosts"
	"shoal/internal/testenv"
)

func TestSmoke(t *testing.T) {
	testenv.RequireDocker(t)
	cfg := hosts.DefaultConfig(testenv.Binary(t))
	cfg.Workers = 1
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := hosts.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := c.WaitAllHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
