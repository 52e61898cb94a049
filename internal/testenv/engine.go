package testenv

import (
	"context"
	"os"
	"sync"
	"testing"

	"shoal/internal/engine"
)

// Engine is the Docker engine of one test node. A private engine is an
// extra dockerd started for the test; when that is impossible every node
// shares the system engine and Shared says so.
type Engine = engine.Engine

// Environment variables that choose the engines.
const (
	// EnvSharedEngine=1 makes every test node use the system engine.
	EnvSharedEngine = engine.EnvSharedEngine
	// EnvRequireEngines=1 fails a test that would fall back to the shared
	// engine (CI sets it: there every node must have its own).
	EnvRequireEngines = "SHOAL_REQUIRE_ENGINES"
	// EnvContainerd names the containerd socket the extra engines share
	// (default: the first of the usual sockets that answers).
	EnvContainerd = engine.EnvContainerd
)

// StartEngine starts a private Docker engine named name for the test and
// loads the sandbox image into it; see StartEngines.
func StartEngine(t testing.TB, name string) *Engine {
	t.Helper()
	return StartEngines(t, name)[0]
}

// StartEngines starts one private Docker engine per name, at once, each an
// extra dockerd beside the system one: its own socket, data root, exec root
// and containerd namespace, sharing the system containerd, with no bridge
// and no iptables rules, and the sandbox image loaded from the system
// engine (package internal/engine). When the test ends each engine's
// containers are removed, its dockerd is stopped (SIGTERM, then SIGKILL)
// and its files are removed.
//
// It needs root, dockerd and a containerd socket. Without them, with
// SHOAL_SHARED_ENGINE=1, or when an engine fails to start and
// SHOAL_REQUIRE_DOCKER is not 1, every name gets the system engine instead
// (Shared is true) and the test log says why; SHOAL_REQUIRE_ENGINES=1 makes
// falling back a failure. It skips (or fails, with SHOAL_REQUIRE_DOCKER=1)
// when there is no system engine at all.
func StartEngines(t testing.TB, names ...string) []*Engine {
	t.Helper()
	return startEngines(t, false, names)
}

var sweepOnce sync.Once

func startEngines(t testing.TB, shared bool, names []string) []*Engine {
	t.Helper()
	sys := RequireDocker(t)
	if !shared {
		reason := engine.Unsupported()
		if reason == "" {
			sweepOnce.Do(func() { engine.SweepStale(t.Logf) })
			engines, err := engine.Start(context.Background(), sys, engine.Options{}, names...)
			if err == nil {
				for _, e := range engines {
					t.Cleanup(func() { stopEngine(t, e) })
				}
				return engines
			}
			if os.Getenv("SHOAL_REQUIRE_DOCKER") == "1" {
				t.Fatalf("start the test engines: %v (set %s=1 to share the system engine instead)", err, EnvSharedEngine)
			}
			reason = err.Error()
		}
		if os.Getenv(EnvRequireEngines) == "1" {
			t.Fatalf("%s=1 but no private Docker engine per node can run: %s", EnvRequireEngines, reason)
		}
		t.Logf("testenv: no private Docker engine per node (%s); every node uses the system engine and they are told apart only by their node labels", reason)
	} else {
		t.Logf("testenv: every node uses the system engine, as the test asked")
	}
	engines := make([]*Engine, len(names))
	for i, name := range names {
		e, err := engine.System(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines[i] = e
	}
	return engines
}

// stopEngine is a private engine's cleanup: the end of its dockerd log if
// the test failed, then Close.
func stopEngine(t testing.TB, e *Engine) {
	if t.Failed() {
		t.Logf("engine %s: last lines of the dockerd log:\n%s", e.Name, e.LogTail(30))
	}
	if err := e.Close(context.Background()); err != nil {
		t.Logf("cleanup: %v", err)
	}
}
