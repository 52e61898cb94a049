package node

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"shoal/connlimit"
	"shoal/metrics"
)

// saturationGrace is how long the API listener may stay saturated (its
// total cap of pending connections reached) before /readyz fails: a burst
// of clients connecting at once clears within it, a flood does not.
const saturationGrace = 2 * time.Second

// fdBudget raises the process's soft limit on open files (RLIMIT_NOFILE)
// to its hard limit, and returns the soft limit then. Go's runtime raises
// it at start, but the process may have been given a lower soft limit by
// an earlier Setrlimit (a test process, say).
func fdBudget() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur, nil
}

// apiConnLimits are the API listener's caps: the configured ones, with
// the total lowered to half the open-file budget if it is above, so that
// connections nobody has authenticated can never take the files etcd, the
// engine and the authenticated connections need.
func apiConnLimits(cfg Config, budget uint64, log *slog.Logger) connlimit.Config {
	lc := connlimit.Config{MaxPending: cfg.MaxPendingConns, MaxPendingPerSource: cfg.MaxPendingConnsPerSource,
		HandshakeTimeout: cfg.HandshakeTimeout, Logger: log}
	if half := budget / 2; budget > 0 && uint64(lc.MaxPending) > half {
		lc.MaxPending = max(1, int(half))
		log.Warn("lowering --max-pending-conns to half the open-file limit (RLIMIT_NOFILE), which the node needs for etcd, the engine and authenticated connections; raise the limit (LimitNOFILE in the systemd unit) to allow more",
			"max_pending_conns", lc.MaxPending, "configured", cfg.MaxPendingConns, "open_file_limit", budget)
	}
	return lc
}

// listenerReady fails while the API listener has been saturated for longer
// than saturationGrace: new clients are being refused.
func listenerReady(l *connlimit.Listener, now time.Time) error {
	st := l.Stats()
	if st.SaturatedSince.IsZero() {
		return nil
	}
	if d := now.Sub(st.SaturatedSince); d > saturationGrace {
		return fmt.Errorf("the API listener is saturated: %d connections accepted and not past their handshake, at its cap of %d (--max-pending-conns), for %s; new clients are refused",
			st.Pending, st.MaxPending, d.Round(100*time.Millisecond))
	}
	return nil
}

// observeConns registers the API listener's metrics.
func observeConns(m *metrics.Metrics, l *connlimit.Listener) {
	m.Gauge("shoal_api_conns_pending", "API connections accepted and not yet past their handshake (bounded by --max-pending-conns).",
		func() float64 { return float64(l.Stats().Pending) })
	m.Gauge("shoal_api_conns_open", "API connections accepted and not yet closed, past their handshake or not.",
		func() float64 { return float64(l.Stats().Open) })
	m.LabelledCounter("shoal_api_conns_refused_total", "API connections closed at once, over the cap of pending connections in total (reason total) or of their source (reason source).",
		"reason", func() map[string]float64 {
			st := l.Stats()
			return map[string]float64{"total": float64(st.RefusedTotal), "source": float64(st.RefusedSource)}
		})
	m.CounterFunc("shoal_api_conns_handshake_timeouts_total", "API connections closed still short of their handshake after --handshake-timeout.",
		func() float64 { return float64(l.Stats().TimedOut) })
	m.Gauge("shoal_api_listener_saturated", "1 from when the API listener's pending connections reach --max-pending-conns (new clients refused) until they fall to three quarters of it.",
		func() float64 {
			if l.Stats().SaturatedSince.IsZero() {
				return 0
			}
			return 1
		})
}
