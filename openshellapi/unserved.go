package openshellapi

// unserved are the methods of OpenShell's service (at the target commit)
// that shoal does not serve: SSH sessions and TCP forwarding, service
// endpoints, provider profiles and credential refresh, settings and
// policy status (a sandbox's policy is served: CreateSandbox, GetSandbox,
// UpdateConfig), the supervisor's own calls, draft policies, sandbox
// tokens and workspaces. Each answers UNIMPLEMENTED saying so (Register), instead of
// gRPC's bare "unknown method". TestUnservedIsTheRest checks the list
// against the wire.
var unserved = []string{
	"CreateSshSession",
	"ExposeService",
	"GetService",
	"ListServices",
	"DeleteService",
	"RevokeSshSession",
	"ForwardTcp",
	"ListProviderProfiles",
	"GetProviderProfile",
	"ImportProviderProfiles",
	"UpdateProviderProfiles",
	"LintProviderProfiles",
	"GetProviderRefreshStatus",
	"ConfigureProviderRefresh",
	"RotateProviderCredential",
	"DeleteProviderRefresh",
	"DeleteProviderProfile",
	"GetSandboxConfig",
	"GetGatewayConfig",
	"GetSandboxPolicyStatus",
	"ListSandboxPolicies",
	"ReportPolicyStatus",
	"GetSandboxProviderEnvironment",
	"PushSandboxLogs",
	"ConnectSupervisor",
	"ReportMainProcessExit",
	"RelayStream",
	"SubmitPolicyAnalysis",
	"GetDraftPolicy",
	"ApproveDraftChunk",
	"RejectDraftChunk",
	"ApproveAllDraftChunks",
	"EditDraftChunk",
	"UndoDraftChunk",
	"ClearDraftChunks",
	"GetDraftHistory",
	"IssueSandboxToken",
	"RefreshSandboxToken",
	"CreateWorkspace",
	"GetWorkspace",
	"ListWorkspaces",
	"DeleteWorkspace",
	"AddWorkspaceMember",
	"RemoveWorkspaceMember",
	"ListWorkspaceMembers",
}
