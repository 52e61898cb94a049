package openshellapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"math"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"

	sandboxv1 "shoal/api/openshell/sandbox/v1"
	shoalv1 "shoal/api/shoal/v1"
)

// UpdateConfig, the one method shoal serves whose messages api/openshell
// does not declare (openshell.v1.UpdateConfigRequest and
// UpdateConfigResponse, with OpenShell's settings and merge operations
// around the policy): they travel as their encodings, read and written
// here against OpenShell's fields at the target commit
// (updateConfigFields, pinned by TestPolicyWireFacts), carried as the
// unknown fields of an empty message. Register serves it beside the
// declared methods (undeclared).

const updateConfigMessage = "openshell.v1.UpdateConfigRequest"

var updateConfigFields = []wireField{
	{name: "name", num: 1, typ: "string"},
	{name: "policy", num: 2, typ: ".openshell.sandbox.v1.SandboxPolicy"},
	{name: "setting_key", num: 3, typ: "string", why: noSettings},
	{name: "setting_value", num: 4, typ: ".openshell.sandbox.v1.SettingValue", why: noSettings},
	{name: "delete_setting", num: 5, typ: "bool", why: noSettings},
	{name: "global", num: 6, typ: "bool", why: "shoal has no gateway-wide policy: update each sandbox's"},
	{name: "merge_operations", num: 7, typ: "repeated .openshell.v1.PolicyMergeOperation", why: "shoal takes whole policies: send policy (GetSandbox's spec.policy, changed)"},
	{name: "expected_resource_version", num: 8, typ: "uint64"},
	{name: "annotations", num: 9, typ: "map<string, string>"},
	{name: "workspace", num: 10, typ: "string"},
}

// The response's fields (settings_revision = 3 and deleted = 4 stay
// unset: no settings).
var updateConfigResponseFields = []wireField{
	{name: "version", num: 1, typ: "uint32"},
	{name: "policy_hash", num: 2, typ: "string"},
	{name: "settings_revision", num: 3, typ: "uint64"},
	{name: "deleted", num: 4, typ: "bool"},
	{name: "annotations", num: 5, typ: "map<string, string>"},
}

const noSettings = "shoal serves no sandbox or gateway settings"

// undeclared are the methods Register serves that api/openshell does not
// declare.
var undeclared = []grpc.MethodDesc{{MethodName: "UpdateConfig", Handler: updateConfigHandler}}

// updateConfigRequest is an UpdateConfigRequest as read from its
// encoding. refused is the INVALID_ARGUMENT for the first field set that
// shoal refuses, answered once the call is authorized.
type updateConfigRequest struct {
	name, workspace string
	policy          *sandboxv1.SandboxPolicy // nil: none sent
	resourceVersion uint64
	annotations     map[string]string
	refused         error
}

// AuditObject names the sandbox in the audit log, as shoal.v1's records do.
func (r *updateConfigRequest) AuditObject() string {
	if r.name == "" {
		return ""
	}
	return ws(r.workspace) + "/" + r.name
}

// readUpdateConfig reads a request's encoding. An error is an encoding
// that does not parse; a field shoal refuses is kept as refused.
func readUpdateConfig(b []byte) (*updateConfigRequest, error) {
	r := &updateConfigRequest{}
	var policy []byte
	err := eachField(updateConfigMessage, b, func(w wireValue) error {
		f, ok, err := known("", updateConfigMessage, updateConfigFields, w)
		if err != nil {
			if r.refused == nil {
				r.refused = err
			}
			return nil
		}
		if !ok {
			return nil
		}
		switch f.name {
		case "name":
			r.name = string(w.b)
		case "workspace":
			r.workspace = string(w.b)
		case "policy":
			// Repeated occurrences of a message merge: their encodings
			// concatenated.
			policy = append(policy, w.b...)
			if r.policy == nil {
				r.policy = &sandboxv1.SandboxPolicy{}
			}
		case "expected_resource_version":
			r.resourceVersion = w.v
		case "annotations":
			k, v, err := stringEntry("annotations", w.b)
			if err != nil {
				return err
			}
			if r.annotations == nil {
				r.annotations = map[string]string{}
			}
			r.annotations[k] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if r.policy != nil {
		r.policy.ProtoReflect().SetUnknown(policy)
	}
	return r, nil
}

// stringEntry reads a map<string, string> entry.
func stringEntry(field string, b []byte) (string, string, error) {
	k, v, err := mapEntry(field, b)
	if err == nil && !utf8.Valid(v) {
		err = invalid(field, "a value is not valid UTF-8")
	}
	return k, string(v), err
}

func updateConfigHandler(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	req, err := readUpdateConfig(in.ProtoReflect().GetUnknown())
	if err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if icpt == nil {
		return s.updateConfig(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/UpdateConfig"}
	return icpt(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.updateConfig(ctx, req.(*updateConfigRequest))
	})
}

// UpdateConfig replaces a sandbox's policy: one shoal.v1 UpdateSandbox
// with set_egress (and set_annotations for annotations), so the version
// moves when the rules or the mode change and stays when they do not; a
// stale expected_resource_version is ABORTED. Established connections
// are not cut: the new policy applies to new ones. It answers the policy's
// version, its hash (SHA-256, hex, of its encoding as GetSandbox answers
// it, version left out) and the sandbox's annotations. Settings, merge
// operations and global policies are INVALID_ARGUMENT naming the field.
//
// in and the answer are encodings (an UpdateConfigRequest and an
// UpdateConfigResponse) carried as an empty message's unknown fields:
// this is the method in process; a client calls it by name with those
// encodings.
func (s *Server) UpdateConfig(ctx context.Context, in *emptypb.Empty) (*emptypb.Empty, error) {
	req, err := readUpdateConfig(in.ProtoReflect().GetUnknown())
	if err != nil {
		return nil, err
	}
	return s.updateConfig(ctx, req)
}

func (s *Server) updateConfig(ctx context.Context, req *updateConfigRequest) (*emptypb.Empty, error) {
	if req.refused != nil {
		return nil, req.refused
	}
	if req.name == "" {
		return nil, invalid("name", "is required: shoal updates one sandbox's policy")
	}
	if req.policy == nil {
		return nil, invalid("policy", "is required: shoal serves policy updates only")
	}
	eg, err := egressOf(req.policy, "policy")
	if err != nil {
		return nil, err
	}
	rv, err := version(req.resourceVersion)
	if err != nil {
		return nil, err
	}
	sb, err := s.api.UpdateSandbox(ctx, &shoalv1.UpdateSandboxRequest{
		Workspace: ws(req.workspace), Name: req.name, ResourceVersion: rv,
		SetEgress: eg, SetAnnotations: req.annotations,
	})
	if err != nil {
		return nil, grpcError(err, true, "set_egress", "policy", "set_annotations", "annotations",
			"resource_version", "expected_resource_version", "name", "name", "workspace", "workspace")
	}
	out := &emptypb.Empty{}
	out.ProtoReflect().SetUnknown(appendUpdateConfigResponse(nil, sb))
	return out, nil
}

// appendUpdateConfigResponse appends the UpdateConfigResponse for a
// sandbox as the update left it.
func appendUpdateConfigResponse(b []byte, sb *shoalv1.Sandbox) []byte {
	e := sb.GetSpec().GetEgress()
	if v := e.GetVersion(); v > 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType) // version
		b = protowire.AppendVarint(b, uint64(min(v, math.MaxUint32)))
	}
	sum := sha256.Sum256(appendPolicy(nil, e, false))
	b = appendString(b, 2, hex.EncodeToString(sum[:])) // policy_hash
	ann := sb.GetMeta().GetAnnotations()
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = appendString(entry, 2, ann[k])
		b = protowire.AppendTag(b, 5, protowire.BytesType) // annotations
		b = protowire.AppendBytes(b, entry)
	}
	return b
}
