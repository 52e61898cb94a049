package openshellapi

import (
	"context"
	"maps"
	"math"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/apiserver"
)

// Where shoal's validation names a field of its own request, the error
// names the OpenShell field it came from.
var createSandboxFields = []string{
	"sandbox.meta.name", "name",
	"sandbox.meta.workspace", "workspace",
	"sandbox.meta.labels", "labels",
	"sandbox.meta.annotations", "annotations",
	"sandbox.spec.env", "spec.environment",
	"sandbox.spec.image", "spec.template.image",
	"sandbox.spec.command", "spec.command",
	"sandbox.spec.providers", "spec.providers",
	"sandbox.spec.egress", "spec.policy",
	"sandbox.spec", "spec",
}

var refFields = []string{"name", "name", "workspace", "workspace"}

// CreateSandbox creates the sandbox and returns it at once (PROVISIONING):
// watch it to READY. Fields of the spec that shoal has no equivalent for
// are refused, naming the field; its policy is the sandbox's egress policy
// (policy.go).
func (s *Server) CreateSandbox(ctx context.Context, req *openshellv1.CreateSandboxRequest) (*openshellv1.SandboxResponse, error) {
	spec, err := specOf(req.GetSpec())
	if err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = generatedName("sandbox")
	}
	sb, err := s.api.CreateSandbox(ctx, &shoalv1.CreateSandboxRequest{Sandbox: &shoalv1.Sandbox{
		Meta: &shoalv1.ObjectMeta{Name: name, Workspace: ws(req.Workspace), Labels: req.Labels, Annotations: req.Annotations},
		Spec: spec,
	}})
	if err != nil {
		return nil, grpcError(err, false, createSandboxFields...)
	}
	return &openshellv1.SandboxResponse{Sandbox: sandboxOf(sb)}, nil
}

// specOf is shoal's spec for an OpenShell one, or INVALID_ARGUMENT naming
// the first field set that shoal cannot honour.
func specOf(in *openshellv1.SandboxSpec) (*shoalv1.SandboxSpec, error) {
	if in == nil {
		return nil, invalid("spec", "is required")
	}
	none := func(field, why string) error {
		return invalid(field, "shoal has no equivalent (%s); leave it unset", why)
	}
	switch {
	case in.LogLevel != "":
		return nil, none("spec.log_level", "processes get no log level from the sandbox; set it in spec.environment")
	case in.ResourceRequirements.GetGpu() != nil:
		return nil, none("spec.resource_requirements.gpu", "no GPUs are given to sandboxes")
	case in.Tty:
		return nil, none("spec.tty", "a sandbox's main process has no terminal; use an interactive exec with tty")
	}
	t := in.Template
	switch {
	case t.GetRuntimeClassName() != "":
		return nil, none("spec.template.runtime_class_name", "sandboxes run on the node's Docker engine")
	case t.GetAgentSocket() != "":
		return nil, none("spec.template.agent_socket", "no agent socket")
	case len(t.GetLabels()) > 0:
		return nil, none("spec.template.labels", "no compute-platform objects to label; use labels")
	case len(t.GetAnnotations()) > 0:
		return nil, none("spec.template.annotations", "no compute-platform objects to annotate; use annotations")
	case t.GetResources() != nil:
		return nil, none("spec.template.resources", "resources are the node's defaults (--sandbox-cpu, --sandbox-memory)")
	case t != nil && t.UserNamespaces != nil:
		return nil, none("spec.template.user_namespaces", "user namespaces are the Docker engine's setting")
	case t.GetDriverConfig() != nil:
		return nil, none("spec.template.driver_config", "no driver configuration")
	}
	eg, err := egressOf(in.Policy, "spec.policy") // policy.go
	if err != nil {
		return nil, err
	}
	env := maps.Clone(t.GetEnvironment())
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, in.Environment) // the spec's value wins
	return &shoalv1.SandboxSpec{
		Image:     t.GetImage(), // empty: the node's default
		Command:   in.Command,   // empty: the image's own
		Env:       env,
		Providers: in.Providers,
		Egress:    eg,
	}, nil
}

func (s *Server) GetSandbox(ctx context.Context, req *openshellv1.GetSandboxRequest) (*openshellv1.SandboxResponse, error) {
	sb, err := s.api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Workspace: ws(req.Workspace), Name: req.Name})
	if err != nil {
		return nil, grpcError(err, false, refFields...)
	}
	return &openshellv1.SandboxResponse{Sandbox: sandboxOf(sb)}, nil
}

func (s *Server) ListSandboxes(ctx context.Context, req *openshellv1.ListSandboxesRequest) (*openshellv1.ListSandboxesResponse, error) {
	w, err := s.scope(ctx, req.Workspace, req.AllWorkspaces)
	if err != nil {
		return nil, grpcError(err, false)
	}
	p := newSandboxPage(req.Limit, req.Offset)
	if err := s.api.EachSandboxRecord(ctx, w, req.LabelSelector, p.add); err != nil {
		return nil, grpcError(err, false)
	}
	items, err := p.encoded()
	if err != nil {
		return nil, err
	}
	// As shoal.v1's list does: a client decodes them as the response's
	// sandboxes; a caller in process gets them still encoded.
	resp := &openshellv1.ListSandboxesResponse{}
	apiserver.SetEncoded(resp, "sandboxes", items)
	return resp, nil
}

// DeleteSandbox records shoal's durable deletion intent and answers
// deleted at once (also for a sandbox already being deleted); the record
// goes when the owning node has removed the container.
func (s *Server) DeleteSandbox(ctx context.Context, req *openshellv1.DeleteSandboxRequest) (*openshellv1.DeleteSandboxResponse, error) {
	if _, err := s.api.DeleteSandbox(ctx, &shoalv1.DeleteSandboxRequest{Workspace: ws(req.Workspace), Name: req.Name}); err != nil {
		return nil, grpcError(err, false, refFields...)
	}
	return &openshellv1.DeleteSandboxResponse{Deleted: true}, nil
}

// StopSandbox asks for the stop and returns at once (STOPPING, or STOPPED
// if it was).
func (s *Server) StopSandbox(ctx context.Context, req *openshellv1.StopSandboxRequest) (*openshellv1.SandboxResponse, error) {
	sb, err := s.api.StopSandbox(ctx, &shoalv1.StopSandboxRequest{Workspace: ws(req.Workspace), Name: req.Name})
	if err != nil {
		return nil, grpcError(err, false, refFields...)
	}
	return &openshellv1.SandboxResponse{Sandbox: sandboxOf(sb)}, nil
}

// StartSandbox asks for the start and returns at once.
func (s *Server) StartSandbox(ctx context.Context, req *openshellv1.StartSandboxRequest) (*openshellv1.SandboxResponse, error) {
	sb, err := s.api.StartSandbox(ctx, &shoalv1.StartSandboxRequest{Workspace: ws(req.Workspace), Name: req.Name})
	if err != nil {
		return nil, grpcError(err, false, refFields...)
	}
	return &openshellv1.SandboxResponse{Sandbox: sandboxOf(sb)}, nil
}

var attachFields = []string{"name", "sandbox_name", "provider", "provider_name", "workspace", "workspace", "resource_version", "expected_resource_version"}

// version is an expected_resource_version as shoal's (0: no check).
func version(v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, invalid("expected_resource_version", "%d is not a resource_version of this cluster", v)
	}
	return int64(v), nil
}

// AttachSandboxProvider: a provider attached already is attached=false,
// OK; a stale expected_resource_version is ABORTED.
func (s *Server) AttachSandboxProvider(ctx context.Context, req *openshellv1.AttachSandboxProviderRequest) (*openshellv1.AttachSandboxProviderResponse, error) {
	rv, err := version(req.ExpectedResourceVersion)
	if err != nil {
		return nil, err
	}
	sb, attached, err := s.api.Attach(ctx, &shoalv1.AttachProviderRequest{Workspace: ws(req.Workspace), Name: req.SandboxName, Provider: req.ProviderName, ResourceVersion: rv})
	if err != nil {
		return nil, grpcError(err, true, attachFields...)
	}
	return &openshellv1.AttachSandboxProviderResponse{Sandbox: sandboxOf(sb), Attached: attached}, nil
}

// DetachSandboxProvider: a provider that is not attached is detached=false,
// OK, if it exists; a missing one is FAILED_PRECONDITION, as for attach.
func (s *Server) DetachSandboxProvider(ctx context.Context, req *openshellv1.DetachSandboxProviderRequest) (*openshellv1.DetachSandboxProviderResponse, error) {
	rv, err := version(req.ExpectedResourceVersion)
	if err != nil {
		return nil, err
	}
	sb, detached, err := s.api.Detach(ctx, &shoalv1.DetachProviderRequest{Workspace: ws(req.Workspace), Name: req.SandboxName, Provider: req.ProviderName, ResourceVersion: rv})
	if err != nil {
		return nil, grpcError(err, true, attachFields...)
	}
	if !detached {
		// Only on this no-op path: whether the provider exists at all.
		if _, err := s.api.GetProvider(ctx, &shoalv1.GetProviderRequest{Workspace: ws(req.Workspace), Name: req.ProviderName}); err != nil {
			if st := grpcError(err, false); isNotFound(st) {
				return nil, failedPrecondition("provider %q not found in workspace %q", req.ProviderName, ws(req.Workspace))
			}
			return nil, grpcError(err, false, attachFields...)
		}
	}
	return &openshellv1.DetachSandboxProviderResponse{Sandbox: sandboxOf(sb), Detached: detached}, nil
}

// ListSandboxProviders lists the providers attached to a sandbox, in the
// order they were attached, credentials redacted.
func (s *Server) ListSandboxProviders(ctx context.Context, req *openshellv1.ListSandboxProvidersRequest) (*openshellv1.ListSandboxProvidersResponse, error) {
	sb, err := s.api.GetSandbox(ctx, &shoalv1.GetSandboxRequest{Workspace: ws(req.Workspace), Name: req.SandboxName})
	if err != nil {
		return nil, grpcError(err, false, "name", "sandbox_name", "workspace", "workspace")
	}
	names := sb.GetSpec().GetProviders()
	out := &openshellv1.ListSandboxProvidersResponse{}
	if len(names) == 0 {
		return out, nil
	}
	all, err := s.api.ListAllProviders(ctx, ws(req.Workspace))
	if err != nil {
		return nil, grpcError(err, false)
	}
	byName := make(map[string]*datamodelv1.Provider, len(all))
	for _, p := range all {
		byName[p.GetMeta().GetName()] = providerOf(p)
	}
	for _, n := range names {
		if p := byName[n]; p != nil {
			out.Providers = append(out.Providers, p)
		}
	}
	return out, nil
}
