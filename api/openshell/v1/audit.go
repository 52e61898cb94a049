package openshellv1

// What shoal's audit log (apiserver/audit.go) records of an OpenShell
// call: the object it touches, as "workspace/name" like shoal.v1's
// records, or "id:UID" for the calls that name their sandbox by id; and,
// where the call does more than its twin says (a watch that follows a
// container's output), the shoal.v1 method it is audited as.

func wsName(ws, name string) string {
	if name == "" {
		return ""
	}
	if ws == "" {
		ws = "default"
	}
	return ws + "/" + name
}

func byID(id string) string {
	if id == "" {
		return ""
	}
	return "id:" + id
}

func (x *AttachSandboxProviderRequest) AuditObject() string {
	return wsName(x.GetWorkspace(), x.GetSandboxName())
}

func (x *DetachSandboxProviderRequest) AuditObject() string {
	return wsName(x.GetWorkspace(), x.GetSandboxName())
}

func (x *CreateProviderRequest) AuditObject() string {
	ws := x.GetWorkspace()
	if ws == "" {
		ws = x.GetProvider().GetMetadata().GetWorkspace()
	}
	return wsName(ws, x.GetProvider().GetMetadata().GetName())
}

func (x *UpdateProviderRequest) AuditObject() string {
	ws := x.GetWorkspace()
	if ws == "" {
		ws = x.GetProvider().GetMetadata().GetWorkspace()
	}
	return wsName(ws, x.GetProvider().GetMetadata().GetName())
}

func (x *ExecSandboxRequest) AuditObject() string { return byID(x.GetSandboxId()) }

// AuditObject of an interactive exec's first message, its start.
func (x *ExecSandboxInput) AuditObject() string { return x.GetStart().AuditObject() }

func (x *GetSandboxLogsRequest) AuditObject() string { return byID(x.GetSandboxId()) }

func (x *WatchSandboxRequest) AuditObject() string { return byID(x.GetId()) }

// AuditedAs: a watch that follows the container's log lines reads what
// shoal.v1's Logs reads, and is audited as that (a plain watch is a read,
// which the audit log leaves out).
func (x *WatchSandboxRequest) AuditedAs() string {
	if x.GetFollowLogs() {
		return "/shoal.v1.Shoal/Logs"
	}
	return ""
}
