package openshellapi

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	sandboxv1 "shoal/api/openshell/sandbox/v1"
	openshellv1 "shoal/api/openshell/v1"
)

// renderField is one field as the wire sees it: full message name, field
// name, number, and its type with cardinality ("repeated string",
// "map<string, int64>", "optional uint32", "oneof payload .openshell.v1.X",
// ".openshell.datamodel.v1.ObjectMeta", "enum .openshell.v1.SandboxPhase").
func renderField(f protoreflect.FieldDescriptor) string {
	typ := func(f protoreflect.FieldDescriptor) string {
		switch f.Kind() {
		case protoreflect.MessageKind, protoreflect.GroupKind:
			return "." + string(f.Message().FullName())
		case protoreflect.EnumKind:
			return "enum ." + string(f.Enum().FullName())
		default:
			return f.Kind().String()
		}
	}
	var t string
	switch {
	case f.IsMap():
		t = fmt.Sprintf("map<%s, %s>", typ(f.MapKey()), typ(f.MapValue()))
	case f.IsList():
		t = "repeated " + typ(f)
	case f.ContainingOneof() != nil && f.ContainingOneof().IsSynthetic():
		t = "optional " + typ(f)
	case f.ContainingOneof() != nil:
		t = "oneof " + string(f.ContainingOneof().Name()) + " " + typ(f)
	default:
		t = typ(f)
	}
	return fmt.Sprintf("%s %s = %d: %s", f.ContainingMessage().FullName(), f.Name(), f.Number(), t)
}

func renderMethod(m protoreflect.MethodDescriptor) string {
	in, out := "."+string(m.Input().FullName()), "."+string(m.Output().FullName())
	if m.IsStreamingClient() {
		in = "stream " + in
	}
	if m.IsStreamingServer() {
		out = "stream " + out
	}
	return fmt.Sprintf("%s(%s) returns (%s)", m.FullName(), in, out)
}

// declared walks the generated files of api/openshell and renders every
// message, field, enum value and method they declare (map entry messages
// are part of their field's rendering).
func declared() (messages, fields, enums, methods []string) {
	files := []protoreflect.FileDescriptor{
		openshellv1.File_openshell_v1_openshell_proto,
		datamodelv1.File_openshell_datamodel_v1_datamodel_proto,
		sandboxv1.File_openshell_sandbox_v1_sandbox_proto,
	}
	for _, fd := range files {
		msgs := fd.Messages()
		for i := 0; i < msgs.Len(); i++ {
			m := msgs.Get(i)
			messages = append(messages, string(m.FullName()))
			for j := 0; j < m.Fields().Len(); j++ {
				fields = append(fields, renderField(m.Fields().Get(j)))
			}
			for j := 0; j < m.Messages().Len(); j++ {
				if !m.Messages().Get(j).IsMapEntry() {
					messages = append(messages, "unexpected nested message "+string(m.Messages().Get(j).FullName()))
				}
			}
		}
		es := fd.Enums()
		for i := 0; i < es.Len(); i++ {
			e := es.Get(i)
			for j := 0; j < e.Values().Len(); j++ {
				v := e.Values().Get(j)
				enums = append(enums, fmt.Sprintf("%s.%s = %d", e.FullName(), v.Name(), v.Number()))
			}
		}
		ss := fd.Services()
		for i := 0; i < ss.Len(); i++ {
			for j := 0; j < ss.Get(i).Methods().Len(); j++ {
				methods = append(methods, renderMethod(ss.Get(i).Methods().Get(j)))
			}
		}
	}
	return messages, fields, enums, methods
}

// TestWireFacts pins every message, field, enum value and method that shoal
// declares for openshell.v1 to OpenShell's proto at commit
// 2f7fb65591ee5746217ace154afc0aa6bf1afc6d (the tables below were read from
// that commit's descriptors). A renumbered, retyped, renamed, missing or
// extra field fails here.
func TestWireFacts(t *testing.T) {
	messages, fields, enums, methods := declared()
	diff := func(what string, got, want []string) {
		t.Helper()
		g, w := map[string]bool{}, map[string]bool{}
		for _, s := range got {
			g[s] = true
		}
		for _, s := range want {
			w[s] = true
		}
		var extra, missing []string
		for s := range g {
			if !w[s] {
				extra = append(extra, s)
			}
		}
		for s := range w {
			if !g[s] {
				missing = append(missing, s)
			}
		}
		sort.Strings(extra)
		sort.Strings(missing)
		if len(extra) > 0 || len(missing) > 0 {
			t.Errorf("%s differ from OpenShell's wire:\n  declared but not upstream:\n    %s\n  upstream but not declared:\n    %s",
				what, strings.Join(extra, "\n    "), strings.Join(missing, "\n    "))
		}
	}
	diff("messages", messages, wireMessages)
	diff("fields", fields, wireFields)
	diff("enum values", enums, wireEnumValues)
	diff("methods", methods, wireMethods)
}

// wireMessages are the messages shoal declares. openshell.sandbox.v1.SandboxPolicy
// is declared without fields on purpose (it is refused when present), so it
// has no rows in wireFields.
var wireMessages = []string{
	"openshell.v1.HealthRequest",
	"openshell.v1.HealthResponse",
	"openshell.v1.GetCurrentUserRequest",
	"openshell.v1.GetCurrentUserResponse",
	"openshell.v1.GetGatewayInfoRequest",
	"openshell.v1.GetGatewayInfoResponse",
	"openshell.v1.ComputeDriverInfo",
	"openshell.v1.ComputeDriverCapabilities",
	"openshell.v1.Sandbox",
	"openshell.v1.SandboxSpec",
	"openshell.v1.ResourceRequirements",
	"openshell.v1.GpuResourceRequirements",
	"openshell.v1.SandboxTemplate",
	"openshell.v1.SandboxStatus",
	"openshell.v1.SandboxCondition",
	"openshell.v1.PlatformEvent",
	"openshell.v1.CreateSandboxRequest",
	"openshell.v1.GetSandboxRequest",
	"openshell.v1.ListSandboxesRequest",
	"openshell.v1.ListSandboxProvidersRequest",
	"openshell.v1.AttachSandboxProviderRequest",
	"openshell.v1.DetachSandboxProviderRequest",
	"openshell.v1.DeleteSandboxRequest",
	"openshell.v1.StopSandboxRequest",
	"openshell.v1.StartSandboxRequest",
	"openshell.v1.SandboxResponse",
	"openshell.v1.ListSandboxesResponse",
	"openshell.v1.ListSandboxProvidersResponse",
	"openshell.v1.AttachSandboxProviderResponse",
	"openshell.v1.DetachSandboxProviderResponse",
	"openshell.v1.DeleteSandboxResponse",
	"openshell.v1.ExecSandboxRequest",
	"openshell.v1.ExecSandboxStdout",
	"openshell.v1.ExecSandboxStderr",
	"openshell.v1.ExecSandboxExit",
	"openshell.v1.ExecSandboxEvent",
	"openshell.v1.ExecSandboxInput",
	"openshell.v1.ExecSandboxWindowResize",
	"openshell.v1.WatchSandboxRequest",
	"openshell.v1.SandboxStreamEvent",
	"openshell.v1.SandboxLogLine",
	"openshell.v1.SandboxStreamWarning",
	"openshell.v1.DraftPolicyUpdate",
	"openshell.v1.GetSandboxLogsRequest",
	"openshell.v1.GetSandboxLogsResponse",
	"openshell.v1.CreateProviderRequest",
	"openshell.v1.GetProviderRequest",
	"openshell.v1.ListProvidersRequest",
	"openshell.v1.UpdateProviderRequest",
	"openshell.v1.DeleteProviderRequest",
	"openshell.v1.ProviderResponse",
	"openshell.v1.ListProvidersResponse",
	"openshell.v1.DeleteProviderResponse",
	"openshell.datamodel.v1.ObjectMeta",
	"openshell.datamodel.v1.CredentialHandle",
	"openshell.datamodel.v1.Provider",
	"openshell.sandbox.v1.SandboxPolicy",
}

// wireFields are OpenShell's fields of the messages in wireMessages, at the
// target commit.
var wireFields = []string{
	"openshell.v1.HealthResponse status = 1: enum .openshell.v1.ServiceStatus",
	"openshell.v1.HealthResponse version = 2: string",
	"openshell.v1.GetCurrentUserResponse subject = 1: string",
	"openshell.v1.GetCurrentUserResponse display_name = 2: string",
	"openshell.v1.GetCurrentUserResponse roles = 3: repeated string",
	"openshell.v1.GetCurrentUserResponse scopes = 4: repeated string",
	"openshell.v1.GetCurrentUserResponse identity_provider = 5: string",
	"openshell.v1.GetGatewayInfoResponse status = 1: enum .openshell.v1.ServiceStatus",
	"openshell.v1.GetGatewayInfoResponse gateway_version = 2: string",
	"openshell.v1.GetGatewayInfoResponse compute_drivers = 3: repeated .openshell.v1.ComputeDriverInfo",
	"openshell.v1.ComputeDriverInfo name = 1: string",
	"openshell.v1.ComputeDriverInfo capabilities = 2: .openshell.v1.ComputeDriverCapabilities",
	"openshell.v1.ComputeDriverCapabilities driver_name = 1: string",
	"openshell.v1.ComputeDriverCapabilities driver_version = 2: string",
	"openshell.v1.Sandbox metadata = 1: .openshell.datamodel.v1.ObjectMeta",
	"openshell.v1.Sandbox spec = 2: .openshell.v1.SandboxSpec",
	"openshell.v1.Sandbox status = 3: .openshell.v1.SandboxStatus",
	"openshell.v1.SandboxSpec log_level = 1: string",
	"openshell.v1.SandboxSpec environment = 5: map<string, string>",
	"openshell.v1.SandboxSpec template = 6: .openshell.v1.SandboxTemplate",
	"openshell.v1.SandboxSpec policy = 7: .openshell.sandbox.v1.SandboxPolicy",
	"openshell.v1.SandboxSpec providers = 8: repeated string",
	"openshell.v1.SandboxSpec resource_requirements = 9: .openshell.v1.ResourceRequirements",
	"openshell.v1.SandboxSpec command = 12: repeated string",
	"openshell.v1.SandboxSpec tty = 13: bool",
	"openshell.v1.ResourceRequirements gpu = 1: .openshell.v1.GpuResourceRequirements",
	"openshell.v1.GpuResourceRequirements count = 1: optional uint32",
	"openshell.v1.SandboxTemplate image = 1: string",
	"openshell.v1.SandboxTemplate runtime_class_name = 2: string",
	"openshell.v1.SandboxTemplate agent_socket = 3: string",
	"openshell.v1.SandboxTemplate labels = 4: map<string, string>",
	"openshell.v1.SandboxTemplate annotations = 5: map<string, string>",
	"openshell.v1.SandboxTemplate environment = 6: map<string, string>",
	"openshell.v1.SandboxTemplate resources = 7: .google.protobuf.Struct",
	"openshell.v1.SandboxTemplate user_namespaces = 10: optional bool",
	"openshell.v1.SandboxTemplate driver_config = 11: .google.protobuf.Struct",
	"openshell.v1.SandboxStatus sandbox_name = 1: string",
	"openshell.v1.SandboxStatus agent_pod = 2: string",
	"openshell.v1.SandboxStatus agent_fd = 3: string",
	"openshell.v1.SandboxStatus sandbox_fd = 4: string",
	"openshell.v1.SandboxStatus conditions = 5: repeated .openshell.v1.SandboxCondition",
	"openshell.v1.SandboxStatus phase = 6: enum .openshell.v1.SandboxPhase",
	"openshell.v1.SandboxStatus current_policy_version = 7: uint32",
	"openshell.v1.SandboxStatus main_process_instance_id = 8: string",
	"openshell.v1.SandboxStatus exit_code = 9: optional int32",
	"openshell.v1.SandboxCondition type = 1: string",
	"openshell.v1.SandboxCondition status = 2: string",
	"openshell.v1.SandboxCondition reason = 3: string",
	"openshell.v1.SandboxCondition message = 4: string",
	"openshell.v1.SandboxCondition last_transition_time = 5: string",
	"openshell.v1.PlatformEvent timestamp_ms = 1: int64",
	"openshell.v1.PlatformEvent source = 2: string",
	"openshell.v1.PlatformEvent type = 3: string",
	"openshell.v1.PlatformEvent reason = 4: string",
	"openshell.v1.PlatformEvent message = 5: string",
	"openshell.v1.PlatformEvent metadata = 6: map<string, string>",
	"openshell.v1.CreateSandboxRequest spec = 1: .openshell.v1.SandboxSpec",
	"openshell.v1.CreateSandboxRequest name = 2: string",
	"openshell.v1.CreateSandboxRequest labels = 3: map<string, string>",
	"openshell.v1.CreateSandboxRequest annotations = 4: map<string, string>",
	"openshell.v1.CreateSandboxRequest workspace = 5: string",
	"openshell.v1.GetSandboxRequest name = 1: string",
	"openshell.v1.GetSandboxRequest workspace = 2: string",
	"openshell.v1.ListSandboxesRequest limit = 1: uint32",
	"openshell.v1.ListSandboxesRequest offset = 2: uint32",
	"openshell.v1.ListSandboxesRequest label_selector = 3: string",
	"openshell.v1.ListSandboxesRequest workspace = 4: string",
	"openshell.v1.ListSandboxesRequest all_workspaces = 5: bool",
	"openshell.v1.ListSandboxProvidersRequest sandbox_name = 1: string",
	"openshell.v1.ListSandboxProvidersRequest workspace = 2: string",
	"openshell.v1.AttachSandboxProviderRequest sandbox_name = 1: string",
	"openshell.v1.AttachSandboxProviderRequest provider_name = 2: string",
	"openshell.v1.AttachSandboxProviderRequest expected_resource_version = 3: uint64",
	"openshell.v1.AttachSandboxProviderRequest workspace = 4: string",
	"openshell.v1.DetachSandboxProviderRequest sandbox_name = 1: string",
	"openshell.v1.DetachSandboxProviderRequest provider_name = 2: string",
	"openshell.v1.DetachSandboxProviderRequest expected_resource_version = 3: uint64",
	"openshell.v1.DetachSandboxProviderRequest workspace = 4: string",
	"openshell.v1.DeleteSandboxRequest name = 1: string",
	"openshell.v1.DeleteSandboxRequest workspace = 2: string",
	"openshell.v1.StopSandboxRequest name = 1: string",
	"openshell.v1.StopSandboxRequest workspace = 2: string",
	"openshell.v1.StartSandboxRequest name = 1: string",
	"openshell.v1.StartSandboxRequest workspace = 2: string",
	"openshell.v1.SandboxResponse sandbox = 1: .openshell.v1.Sandbox",
	"openshell.v1.ListSandboxesResponse sandboxes = 1: repeated .openshell.v1.Sandbox",
	"openshell.v1.ListSandboxProvidersResponse providers = 1: repeated .openshell.datamodel.v1.Provider",
	"openshell.v1.AttachSandboxProviderResponse sandbox = 1: .openshell.v1.Sandbox",
	"openshell.v1.AttachSandboxProviderResponse attached = 2: bool",
	"openshell.v1.DetachSandboxProviderResponse sandbox = 1: .openshell.v1.Sandbox",
	"openshell.v1.DetachSandboxProviderResponse detached = 2: bool",
	"openshell.v1.DeleteSandboxResponse deleted = 1: bool",
	"openshell.v1.ExecSandboxRequest sandbox_id = 1: string",
	"openshell.v1.ExecSandboxRequest command = 2: repeated string",
	"openshell.v1.ExecSandboxRequest workdir = 3: string",
	"openshell.v1.ExecSandboxRequest environment = 4: map<string, string>",
	"openshell.v1.ExecSandboxRequest timeout_seconds = 5: uint32",
	"openshell.v1.ExecSandboxRequest stdin = 6: bytes",
	"openshell.v1.ExecSandboxRequest tty = 7: bool",
	"openshell.v1.ExecSandboxRequest cols = 8: uint32",
	"openshell.v1.ExecSandboxRequest rows = 9: uint32",
	"openshell.v1.ExecSandboxStdout data = 1: bytes",
	"openshell.v1.ExecSandboxStderr data = 1: bytes",
	"openshell.v1.ExecSandboxExit exit_code = 1: int32",
	"openshell.v1.ExecSandboxEvent stdout = 1: oneof payload .openshell.v1.ExecSandboxStdout",
	"openshell.v1.ExecSandboxEvent stderr = 2: oneof payload .openshell.v1.ExecSandboxStderr",
	"openshell.v1.ExecSandboxEvent exit = 3: oneof payload .openshell.v1.ExecSandboxExit",
	"openshell.v1.ExecSandboxInput start = 1: oneof payload .openshell.v1.ExecSandboxRequest",
	"openshell.v1.ExecSandboxInput stdin = 2: oneof payload bytes",
	"openshell.v1.ExecSandboxInput resize = 3: oneof payload .openshell.v1.ExecSandboxWindowResize",
	"openshell.v1.ExecSandboxWindowResize cols = 1: uint32",
	"openshell.v1.ExecSandboxWindowResize rows = 2: uint32",
	"openshell.v1.WatchSandboxRequest id = 1: string",
	"openshell.v1.WatchSandboxRequest follow_status = 2: bool",
	"openshell.v1.WatchSandboxRequest follow_logs = 3: bool",
	"openshell.v1.WatchSandboxRequest follow_events = 4: bool",
	"openshell.v1.WatchSandboxRequest log_tail_lines = 5: uint32",
	"openshell.v1.WatchSandboxRequest event_tail = 6: uint32",
	"openshell.v1.WatchSandboxRequest stop_on_terminal = 7: bool",
	"openshell.v1.WatchSandboxRequest log_since_ms = 8: int64",
	"openshell.v1.WatchSandboxRequest log_sources = 9: repeated string",
	"openshell.v1.WatchSandboxRequest log_min_level = 10: string",
	"openshell.v1.SandboxStreamEvent sandbox = 1: oneof payload .openshell.v1.Sandbox",
	"openshell.v1.SandboxStreamEvent log = 2: oneof payload .openshell.v1.SandboxLogLine",
	"openshell.v1.SandboxStreamEvent event = 3: oneof payload .openshell.v1.PlatformEvent",
	"openshell.v1.SandboxStreamEvent warning = 4: oneof payload .openshell.v1.SandboxStreamWarning",
	"openshell.v1.SandboxStreamEvent draft_policy_update = 5: oneof payload .openshell.v1.DraftPolicyUpdate",
	"openshell.v1.SandboxLogLine sandbox_id = 1: string",
	"openshell.v1.SandboxLogLine timestamp_ms = 2: int64",
	"openshell.v1.SandboxLogLine level = 3: string",
	"openshell.v1.SandboxLogLine target = 4: string",
	"openshell.v1.SandboxLogLine message = 5: string",
	"openshell.v1.SandboxLogLine source = 6: string",
	"openshell.v1.SandboxLogLine fields = 7: map<string, string>",
	"openshell.v1.SandboxStreamWarning message = 1: string",
	"openshell.v1.DraftPolicyUpdate draft_version = 1: uint64",
	"openshell.v1.DraftPolicyUpdate new_chunks = 2: uint32",
	"openshell.v1.DraftPolicyUpdate total_pending = 3: uint32",
	"openshell.v1.DraftPolicyUpdate summary = 4: string",
	"openshell.v1.GetSandboxLogsRequest sandbox_id = 1: string",
	"openshell.v1.GetSandboxLogsRequest lines = 2: uint32",
	"openshell.v1.GetSandboxLogsRequest since_ms = 3: int64",
	"openshell.v1.GetSandboxLogsRequest sources = 4: repeated string",
	"openshell.v1.GetSandboxLogsRequest min_level = 5: string",
	"openshell.v1.GetSandboxLogsRequest workspace = 6: string",
	"openshell.v1.GetSandboxLogsResponse logs = 1: repeated .openshell.v1.SandboxLogLine",
	"openshell.v1.GetSandboxLogsResponse buffer_total = 2: uint32",
	"openshell.v1.CreateProviderRequest provider = 1: .openshell.datamodel.v1.Provider",
	"openshell.v1.CreateProviderRequest workspace = 2: string",
	"openshell.v1.GetProviderRequest name = 1: string",
	"openshell.v1.GetProviderRequest workspace = 2: string",
	"openshell.v1.ListProvidersRequest limit = 1: uint32",
	"openshell.v1.ListProvidersRequest offset = 2: uint32",
	"openshell.v1.ListProvidersRequest workspace = 3: string",
	"openshell.v1.ListProvidersRequest all_workspaces = 4: bool",
	"openshell.v1.UpdateProviderRequest provider = 1: .openshell.datamodel.v1.Provider",
	"openshell.v1.UpdateProviderRequest credential_expires_at_ms = 2: map<string, int64>",
	"openshell.v1.UpdateProviderRequest workspace = 3: string",
	"openshell.v1.DeleteProviderRequest name = 1: string",
	"openshell.v1.DeleteProviderRequest workspace = 2: string",
	"openshell.v1.ProviderResponse provider = 1: .openshell.datamodel.v1.Provider",
	"openshell.v1.ListProvidersResponse providers = 1: repeated .openshell.datamodel.v1.Provider",
	"openshell.v1.DeleteProviderResponse deleted = 1: bool",
	"openshell.datamodel.v1.ObjectMeta id = 1: string",
	"openshell.datamodel.v1.ObjectMeta name = 2: string",
	"openshell.datamodel.v1.ObjectMeta created_at_ms = 3: int64",
	"openshell.datamodel.v1.ObjectMeta labels = 4: map<string, string>",
	"openshell.datamodel.v1.ObjectMeta resource_version = 5: uint64",
	"openshell.datamodel.v1.ObjectMeta annotations = 6: map<string, string>",
	"openshell.datamodel.v1.ObjectMeta workspace = 7: string",
	"openshell.datamodel.v1.ObjectMeta deletion_timestamp_ms = 8: int64",
	"openshell.datamodel.v1.CredentialHandle driver = 1: string",
	"openshell.datamodel.v1.CredentialHandle handle = 2: string",
	"openshell.datamodel.v1.CredentialHandle metadata = 3: map<string, string>",
	"openshell.datamodel.v1.Provider metadata = 1: .openshell.datamodel.v1.ObjectMeta",
	"openshell.datamodel.v1.Provider type = 2: string",
	"openshell.datamodel.v1.Provider credentials = 3: map<string, string>",
	"openshell.datamodel.v1.Provider config = 4: map<string, string>",
	"openshell.datamodel.v1.Provider credential_expires_at_ms = 5: map<string, int64>",
	"openshell.datamodel.v1.Provider profile_workspace = 6: string",
	"openshell.datamodel.v1.Provider credential_handles = 7: map<string, .openshell.datamodel.v1.CredentialHandle>",
}

// wireEnumValues are OpenShell's values of the enums shoal declares.
var wireEnumValues = []string{
	"openshell.v1.ServiceStatus.SERVICE_STATUS_UNSPECIFIED = 0",
	"openshell.v1.ServiceStatus.SERVICE_STATUS_HEALTHY = 1",
	"openshell.v1.ServiceStatus.SERVICE_STATUS_DEGRADED = 2",
	"openshell.v1.ServiceStatus.SERVICE_STATUS_UNHEALTHY = 3",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_UNSPECIFIED = 0",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_PROVISIONING = 1",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_READY = 2",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_ERROR = 3",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_DELETING = 4",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_UNKNOWN = 5",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_STOPPING = 6",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_STOPPED = 7",
	"openshell.v1.SandboxPhase.SANDBOX_PHASE_STARTING = 8",
}

// wireMethods are the served methods with OpenShell's request and response
// types and streaming.
var wireMethods = []string{
	"openshell.v1.OpenShell.Health(.openshell.v1.HealthRequest) returns (.openshell.v1.HealthResponse)",
	"openshell.v1.OpenShell.GetCurrentUser(.openshell.v1.GetCurrentUserRequest) returns (.openshell.v1.GetCurrentUserResponse)",
	"openshell.v1.OpenShell.GetGatewayInfo(.openshell.v1.GetGatewayInfoRequest) returns (.openshell.v1.GetGatewayInfoResponse)",
	"openshell.v1.OpenShell.CreateSandbox(.openshell.v1.CreateSandboxRequest) returns (.openshell.v1.SandboxResponse)",
	"openshell.v1.OpenShell.GetSandbox(.openshell.v1.GetSandboxRequest) returns (.openshell.v1.SandboxResponse)",
	"openshell.v1.OpenShell.ListSandboxes(.openshell.v1.ListSandboxesRequest) returns (.openshell.v1.ListSandboxesResponse)",
	"openshell.v1.OpenShell.ListSandboxProviders(.openshell.v1.ListSandboxProvidersRequest) returns (.openshell.v1.ListSandboxProvidersResponse)",
	"openshell.v1.OpenShell.AttachSandboxProvider(.openshell.v1.AttachSandboxProviderRequest) returns (.openshell.v1.AttachSandboxProviderResponse)",
	"openshell.v1.OpenShell.DetachSandboxProvider(.openshell.v1.DetachSandboxProviderRequest) returns (.openshell.v1.DetachSandboxProviderResponse)",
	"openshell.v1.OpenShell.DeleteSandbox(.openshell.v1.DeleteSandboxRequest) returns (.openshell.v1.DeleteSandboxResponse)",
	"openshell.v1.OpenShell.StopSandbox(.openshell.v1.StopSandboxRequest) returns (.openshell.v1.SandboxResponse)",
	"openshell.v1.OpenShell.StartSandbox(.openshell.v1.StartSandboxRequest) returns (.openshell.v1.SandboxResponse)",
	"openshell.v1.OpenShell.ExecSandbox(.openshell.v1.ExecSandboxRequest) returns (stream .openshell.v1.ExecSandboxEvent)",
	"openshell.v1.OpenShell.ExecSandboxInteractive(stream .openshell.v1.ExecSandboxInput) returns (stream .openshell.v1.ExecSandboxEvent)",
	"openshell.v1.OpenShell.CreateProvider(.openshell.v1.CreateProviderRequest) returns (.openshell.v1.ProviderResponse)",
	"openshell.v1.OpenShell.GetProvider(.openshell.v1.GetProviderRequest) returns (.openshell.v1.ProviderResponse)",
	"openshell.v1.OpenShell.ListProviders(.openshell.v1.ListProvidersRequest) returns (.openshell.v1.ListProvidersResponse)",
	"openshell.v1.OpenShell.UpdateProvider(.openshell.v1.UpdateProviderRequest) returns (.openshell.v1.ProviderResponse)",
	"openshell.v1.OpenShell.DeleteProvider(.openshell.v1.DeleteProviderRequest) returns (.openshell.v1.DeleteProviderResponse)",
	"openshell.v1.OpenShell.GetSandboxLogs(.openshell.v1.GetSandboxLogsRequest) returns (.openshell.v1.GetSandboxLogsResponse)",
	"openshell.v1.OpenShell.WatchSandbox(.openshell.v1.WatchSandboxRequest) returns (stream .openshell.v1.SandboxStreamEvent)",
}

// wireAllMethods are every method of OpenShell's service at the target
// commit: the ones served (wireMethods) and the ones answered
// UNIMPLEMENTED (unserved).
var wireAllMethods = []string{
	"Health",
	"GetCurrentUser",
	"GetGatewayInfo",
	"CreateSandbox",
	"GetSandbox",
	"ListSandboxes",
	"ListSandboxProviders",
	"AttachSandboxProvider",
	"DetachSandboxProvider",
	"DeleteSandbox",
	"StopSandbox",
	"StartSandbox",
	"CreateSshSession",
	"ExposeService",
	"GetService",
	"ListServices",
	"DeleteService",
	"RevokeSshSession",
	"ExecSandbox",
	"ForwardTcp",
	"ExecSandboxInteractive",
	"CreateProvider",
	"GetProvider",
	"ListProviders",
	"ListProviderProfiles",
	"GetProviderProfile",
	"ImportProviderProfiles",
	"UpdateProviderProfiles",
	"LintProviderProfiles",
	"UpdateProvider",
	"GetProviderRefreshStatus",
	"ConfigureProviderRefresh",
	"RotateProviderCredential",
	"DeleteProviderRefresh",
	"DeleteProvider",
	"DeleteProviderProfile",
	"GetSandboxConfig",
	"GetGatewayConfig",
	"UpdateConfig",
	"GetSandboxPolicyStatus",
	"ListSandboxPolicies",
	"ReportPolicyStatus",
	"GetSandboxProviderEnvironment",
	"GetSandboxLogs",
	"PushSandboxLogs",
	"ConnectSupervisor",
	"ReportMainProcessExit",
	"RelayStream",
	"WatchSandbox",
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

// TestUnservedIsTheRest: every method of the service is either served or
// answered as not served, never both, never neither.
func TestUnservedIsTheRest(t *testing.T) {
	_, _, _, methods := declared()
	served := map[string]bool{}
	for _, m := range methods {
		served[m[len("openshell.v1.OpenShell."):strings.Index(m, "(")]] = true
	}
	for _, m := range undeclared {
		if served[m.MethodName] {
			t.Errorf("%s is declared and served by hand", m.MethodName)
		}
		served[m.MethodName] = true
	}
	un := map[string]bool{}
	for _, m := range unserved {
		if served[m] || un[m] {
			t.Errorf("%s is listed as unserved but is served, or listed twice", m)
		}
		un[m] = true
	}
	for _, m := range wireAllMethods {
		if !served[m] && !un[m] {
			t.Errorf("%s is neither served nor listed as unserved", m)
		}
		delete(served, m)
		delete(un, m)
	}
	for m := range served {
		t.Errorf("%s is served but not a method of OpenShell's service", m)
	}
	for m := range un {
		t.Errorf("%s is listed as unserved but not a method of OpenShell's service", m)
	}
	twins := Twins()
	for _, m := range wireAllMethods {
		if twins["/"+ServiceName+"/"+m] == "" {
			t.Errorf("%s has no twin: it would be admin only", m)
		}
	}
}
