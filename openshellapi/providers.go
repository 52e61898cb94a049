package openshellapi

import (
	"context"
	"math"

	datamodelv1 "shoal/api/openshell/datamodel/v1"
	openshellv1 "shoal/api/openshell/v1"
	shoalv1 "shoal/api/shoal/v1"
)

var providerFields = []string{
	"provider.meta.name", "provider.metadata.name",
	"provider.meta.workspace", "workspace",
	"provider.meta.labels", "provider.metadata.labels",
	"provider.meta.annotations", "provider.metadata.annotations",
	"provider.type_name", "provider.type",
	"resource_version", "provider.metadata.resource_version",
}

// providerRequest checks what shoal cannot keep of a provider in a
// request, and returns its workspace: the request's, or the metadata's
// (they may not differ).
func providerRequest(p *datamodelv1.Provider, workspace string) (string, error) {
	if p == nil {
		return "", invalid("provider", "is required")
	}
	switch {
	case len(p.CredentialHandles) > 0:
		return "", invalid("provider.credential_handles", "handles are the gateway's own state, never a client's; give credentials instead")
	case len(p.CredentialExpiresAtMs) > 0:
		return "", invalid("provider.credential_expires_at_ms", "shoal keeps no credential expiry; leave it unset")
	case p.ProfileWorkspace != "":
		return "", invalid("provider.profile_workspace", "shoal has no provider profiles; leave it unset")
	}
	mw := p.GetMetadata().GetWorkspace()
	if workspace != "" && mw != "" && workspace != mw {
		return "", invalid("provider.metadata.workspace", "is %q but the request's workspace is %q", mw, workspace)
	}
	if workspace == "" {
		workspace = mw
	}
	return ws(workspace), nil
}

// CreateProvider keeps the type as given (type_name) with shoal's nearest
// type beside it; an empty name gets a generated one.
func (s *Server) CreateProvider(ctx context.Context, req *openshellv1.CreateProviderRequest) (*openshellv1.ProviderResponse, error) {
	in := req.GetProvider()
	w, err := providerRequest(in, req.Workspace)
	if err != nil {
		return nil, err
	}
	if in.Type == "" {
		return nil, invalid("provider.type", "is required")
	}
	name := in.GetMetadata().GetName()
	if name == "" {
		name = generatedName("provider")
	}
	m := in.GetMetadata()
	p, err := s.api.CreateProvider(ctx, &shoalv1.CreateProviderRequest{Provider: &shoalv1.Provider{
		Meta:        &shoalv1.ObjectMeta{Name: name, Workspace: w, Labels: m.GetLabels(), Annotations: m.GetAnnotations()},
		Type:        shoalType(in.Type),
		TypeName:    in.Type,
		Credentials: in.Credentials,
		Config:      in.Config,
	}})
	if err != nil {
		return nil, grpcError(err, false, providerFields...)
	}
	return &openshellv1.ProviderResponse{Provider: providerOf(p)}, nil
}

func (s *Server) GetProvider(ctx context.Context, req *openshellv1.GetProviderRequest) (*openshellv1.ProviderResponse, error) {
	p, err := s.api.GetProvider(ctx, &shoalv1.GetProviderRequest{Workspace: ws(req.Workspace), Name: req.Name})
	if err != nil {
		return nil, grpcError(err, false, refFields...)
	}
	return &openshellv1.ProviderResponse{Provider: providerOf(p)}, nil
}

func (s *Server) ListProviders(ctx context.Context, req *openshellv1.ListProvidersRequest) (*openshellv1.ListProvidersResponse, error) {
	w, err := s.scope(ctx, req.Workspace, req.AllWorkspaces)
	if err != nil {
		return nil, grpcError(err, false)
	}
	all, err := s.api.ListAllProviders(ctx, w)
	if err != nil {
		return nil, grpcError(err, false)
	}
	return &openshellv1.ListProvidersResponse{Providers: page(all, providerOf, req.Limit, req.Offset)}, nil
}

// UpdateProvider merges: a credentials or config key with a value is set,
// one with an empty value removed, an empty map changes nothing; labels
// and annotations merge the same way. A credential sent back as REDACTED
// (a provider read, changed and sent whole) keeps its stored value. The
// type may be repeated, not changed. A non-zero
// metadata.resource_version that is not the current one is ABORTED.
func (s *Server) UpdateProvider(ctx context.Context, req *openshellv1.UpdateProviderRequest) (*openshellv1.ProviderResponse, error) {
	in := req.GetProvider()
	w, err := providerRequest(in, req.Workspace)
	if err != nil {
		return nil, err
	}
	if len(req.CredentialExpiresAtMs) > 0 {
		return nil, invalid("credential_expires_at_ms", "shoal keeps no credential expiry; leave it unset")
	}
	m := in.GetMetadata()
	if m.GetResourceVersion() > math.MaxInt64 {
		return nil, invalid("provider.metadata.resource_version", "%d is not a resource_version of this cluster", m.GetResourceVersion())
	}
	creds := make(map[string]string, len(in.Credentials))
	for k, v := range in.Credentials {
		if v != Redacted {
			creds[k] = v
		}
	}
	p, err := s.api.UpdateProvider(ctx, &shoalv1.UpdateProviderRequest{
		Provider: &shoalv1.Provider{
			Meta:        &shoalv1.ObjectMeta{Name: m.GetName(), Workspace: w, Labels: m.GetLabels(), Annotations: m.GetAnnotations()},
			TypeName:    in.Type,
			Credentials: creds,
			Config:      in.Config,
		},
		Merge:             true,
		UpdateCredentials: len(creds) > 0,
		UpdateConfig:      len(in.Config) > 0,
		UpdateLabels:      len(m.GetLabels()) > 0,
		UpdateAnnotations: len(m.GetAnnotations()) > 0,
		ResourceVersion:   int64(m.GetResourceVersion()),
	})
	if err != nil {
		return nil, grpcError(err, true, providerFields...)
	}
	return &openshellv1.ProviderResponse{Provider: providerOf(p)}, nil
}

// DeleteProvider: a missing provider is deleted=false, OK; one attached to
// a live sandbox is FAILED_PRECONDITION naming the sandboxes; one held only
// by sandboxes being deleted becomes terminating and is deleted=true: it
// is gone once they are.
func (s *Server) DeleteProvider(ctx context.Context, req *openshellv1.DeleteProviderRequest) (*openshellv1.DeleteProviderResponse, error) {
	_, err := s.api.DeleteProvider(ctx, &shoalv1.DeleteProviderRequest{Workspace: ws(req.Workspace), Name: req.Name})
	if st := grpcError(err, false, refFields...); isNotFound(st) {
		return &openshellv1.DeleteProviderResponse{Deleted: false}, nil
	} else if st != nil {
		return nil, st
	}
	return &openshellv1.DeleteProviderResponse{Deleted: true}, nil
}
