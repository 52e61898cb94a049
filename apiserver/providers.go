package apiserver

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

func (s *Server) CreateProvider(ctx context.Context, req *shoalv1.CreateProviderRequest) (*shoalv1.Provider, error) {
	if err := validateProvider(req.GetProvider(), true); err != nil {
		return nil, err
	}
	p := proto.Clone(req.Provider).(*shoalv1.Provider)
	p.Meta.Workspace = ws(p.Meta.Workspace)
	created, err := s.cfg.Store.CreateProvider(ctx, p)
	return redact(created), err
}

func (s *Server) GetProvider(ctx context.Context, req *shoalv1.GetProviderRequest) (*shoalv1.Provider, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	p, err := s.cfg.Store.GetProvider(ctx, ws(req.Workspace), req.Name)
	return redact(p), err
}

func (s *Server) ListProviders(ctx context.Context, req *shoalv1.ListProvidersRequest) (*shoalv1.ListProvidersResponse, error) {
	if err := validWorkspace("workspace", req.Workspace); err != nil {
		return nil, err
	}
	if err := validPageSize(req.PageSize); err != nil {
		return nil, err
	}
	ref := listRef{Kind: "providers", Workspace: ws(req.Workspace)}
	o, err := s.tokens.decode(ctx, req.PageToken, ref, listOptions(req.PageSize))
	if err != nil {
		return nil, err
	}
	page, err := s.cfg.Store.ListProviders(ctx, ref.Workspace, o, nil)
	if err != nil {
		return nil, err
	}
	next, err := s.tokens.encode(ctx, ref, page.Next)
	if err != nil {
		return nil, err
	}
	items := make([]*shoalv1.Provider, len(page.Items))
	for i, p := range page.Items {
		items[i] = redact(p)
	}
	return &shoalv1.ListProvidersResponse{Items: items, NextPageToken: next, ResourceVersion: page.Revision, Warnings: page.Warnings}, nil
}

func (s *Server) UpdateProvider(ctx context.Context, req *shoalv1.UpdateProviderRequest) (*shoalv1.Provider, error) {
	if err := validateProvider(req.GetProvider(), false); err != nil {
		return nil, err
	}
	if err := validVersion("resource_version", req.ResourceVersion); err != nil {
		return nil, err
	}
	in := req.Provider
	p, err := s.cfg.Store.UpdateProvider(ctx, ws(in.Meta.Workspace), in.Meta.Name, store.Preconditions{ResourceVersion: req.ResourceVersion},
		func(p *shoalv1.Provider) error {
			if p.Meta.DeletionTimestamp != nil {
				return shoal.FailedPrecondition("provider %q is being deleted", in.Meta.Name)
			}
			if in.TypeName != "" && in.TypeName != p.EffectiveTypeName() {
				return shoal.Invalid("provider.type_name", "is %q and cannot change", p.EffectiveTypeName())
			}
			if in.Type != shoalv1.ProviderType_PROVIDER_TYPE_UNSPECIFIED && in.Type != p.Type {
				p.Type = in.Type
				p.TypeName = "" // named after the new type from now on
			}
			if req.UpdateCredentials {
				var added []string
				for _, k := range slices.Sorted(maps.Keys(in.Credentials)) {
					if _, had := p.Credentials[k]; !had && (!req.Merge || in.Credentials[k] != "") {
						added = append(added, k)
					}
				}
				if len(added) > 0 {
					if err := s.attachedClash(ctx, p.Meta.Workspace, p.Meta.Name, added); err != nil {
						return err
					}
				}
				p.Credentials = updated(p.Credentials, in.Credentials, req.Merge)
			}
			if req.UpdateConfig {
				p.Config = updated(p.Config, in.Config, req.Merge)
			}
			if req.UpdateLabels {
				p.Meta.Labels = updated(p.Meta.Labels, in.Meta.Labels, req.Merge)
			}
			if req.UpdateAnnotations {
				p.Meta.Annotations = updated(p.Meta.Annotations, in.Meta.Annotations, req.Merge)
			}
			if len(p.Credentials) > MaxCredentials || len(p.Config) > MaxCredentials {
				return shoal.Invalid("provider", "the merged provider would have %d credentials and %d config entries; at most %d each are allowed", len(p.Credentials), len(p.Config), MaxCredentials)
			}
			if err := validLabels("provider.meta.labels", p.Meta.Labels); err != nil {
				return err
			}
			if err := validAnnotations("provider.meta.annotations", p.Meta.Annotations); err != nil {
				return err
			}
			// The request alone fits; with what it keeps of the stored
			// provider (opened: the limit is on plaintext) it must fit too.
			creds, err := s.cfg.Store.OpenCredentials(p)
			if err != nil {
				return err
			}
			return validBytes("provider", &shoalv1.Provider{Credentials: creds, Config: p.Config}, MaxSpecBytes)
		})
	return redact(p), err
}

// updated is a provider map after an update: in itself, or with merge,
// cur with each key of in set to its value, or removed if that is empty.
// An unsealed credential merged among sealed ones is sealed by the store.
func updated(cur, in map[string]string, merge bool) map[string]string {
	if !merge {
		return maps.Clone(in)
	}
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range in {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

func (s *Server) DeleteProvider(ctx context.Context, req *shoalv1.DeleteProviderRequest) (*shoalv1.DeleteProviderResponse, error) {
	if err := validateRef(req.Workspace, req.Name); err != nil {
		return nil, err
	}
	pre := store.Preconditions{UID: req.GetPreconditions().GetUid(), ResourceVersion: req.GetPreconditions().GetResourceVersion()}
	if err := validVersion("preconditions.resource_version", pre.ResourceVersion); err != nil {
		return nil, err
	}
	deleted, p, err := s.cfg.Store.DeleteProvider(ctx, ws(req.Workspace), req.Name, pre)
	if err != nil {
		return nil, err
	}
	if deleted || !req.Wait {
		return &shoalv1.DeleteProviderResponse{Deleted: deleted, Provider: redact(p)}, nil
	}
	if err := s.waitProviderGone(ctx, p); err != nil {
		return nil, err
	}
	return &shoalv1.DeleteProviderResponse{Deleted: true}, nil
}

func (s *Server) waitProviderGone(ctx context.Context, p *shoalv1.Provider) error {
	ctx, cancel := s.bindShutdown(ctx)
	w := store.NewWatch(cancel, s.cfg.Store.WatchProvider(ctx, p.Meta.Workspace, p.Meta.Name, p.Meta.ResourceVersion))
	defer w.Stop() // until the watch goroutine has returned
	for ev := range w.C {
		if ev.Err != nil {
			return ev.Err
		}
		if ev.Type == shoalv1.EventType_DELETED || ev.Object.Meta.Uid != p.Meta.Uid {
			return nil
		}
	}
	return ctxDone(ctx, "waiting for provider "+p.Meta.Name+" to be removed")
}
