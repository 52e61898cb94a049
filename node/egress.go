package node

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"shoal/agent"
	"shoal/apiserver"
	"shoal/audit"
	"shoal/docker"
	"shoal/egress"
	"shoal/hollow"
)

// egressConfig is the agent's egress enforcement (package egress), when
// the node's engine can run sidecars (Docker), or simulates them (a
// hollow node with --hollow-egress; hollow/egress.go). Each
// refused or audited connection is also an audit-log line, at most
// egressAuditPerSecond a second.
func egressConfig(cfg Config, rt engine, auditLog apiserver.Auditor) *agent.EgressConfig {
	er, ok := rt.(agent.EgressRuntime)
	if !ok || (cfg.Runtime == RuntimeHollow && !cfg.HollowEgress) {
		return nil
	}
	dir := cfg.EgressDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "egress")
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // the engine resolves the bind mount
	}
	ec := &agent.EgressConfig{Dir: dir, Runtime: er}
	if auditLog != nil {
		lim := &perSecond{max: egressAuditPerSecond}
		ec.Audit = func(sandbox string, d egress.Decision) {
			if !lim.allow(time.Now()) {
				return
			}
			_ = auditLog.Write(audit.Record{Time: time.Now(), Node: cfg.ID, Identity: "sandbox", Method: "egress/" + d.Verdict.String(),
				Object: sandbox, Code: auditCode(d.Verdict), Error: fmt.Sprintf("%s:%d: %s (policy version %d)", d.Host, d.Port, d.Reason, d.PolicyVersion)})
		}
	}
	return ec
}

const egressAuditPerSecond = 20

// The node's engine must serve egress, or sandboxes with rules would be
// reported not enforced without anything saying why.
var (
	_ agent.EgressRuntime = (*docker.Runtime)(nil)
	_ agent.EgressRuntime = (*hollow.Runtime)(nil)
)

func auditCode(v egress.Verdict) string {
	if v == egress.VerdictAudit {
		return "OK"
	}
	return "PermissionDenied"
}

// perSecond admits at most max events in each second.
type perSecond struct {
	mu  sync.Mutex
	max int
	sec int64
	n   int
}

func (p *perSecond) allow(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := now.Unix(); s != p.sec {
		p.sec, p.n = s, 0
	}
	p.n++
	return p.n <= p.max
}
