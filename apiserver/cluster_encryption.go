package apiserver

import (
	"context"
	"fmt"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// RotateEncryptionKey re-seals every provider's credentials under this
// node's current key, one provider at a time through the update loop. The
// list is read once, in pages of 100; a provider made after it is sealed
// with the current key by its own write. A provider that fails is named in
// the response and the others go on; a corrupt record (one that does not
// decode) is named among the skipped.
func (s *ClusterServer) RotateEncryptionKey(ctx context.Context, req *shoalv1.RotateEncryptionKeyRequest) (*shoalv1.RotateEncryptionKeyResponse, error) {
	if w := req.GetWorkspace(); w != "" && !store.IsName(w) {
		return nil, shoal.GRPCStatus(shoal.Invalid("workspace", "%q is not a workspace name", w))
	}
	if s.cfg.Keys == nil {
		return nil, shoal.GRPCStatus(shoal.FailedPrecondition("this node has no --encryption-key-file: there is no key to encrypt with"))
	}
	// Every node must seal with this node's key, or it would go on
	// sealing under its own; then the key is recorded before anything is
	// re-sealed, so a node started later with an old key file is refused.
	if err := s.cfg.Store.BeginRotation(ctx); err != nil {
		return nil, shoal.GRPCStatus(err)
	}
	resp := &shoalv1.RotateEncryptionKeyResponse{Key: s.cfg.Keys.Current()}
	o := store.ListOptions{Limit: 100}
	for {
		page, err := s.cfg.Store.ListProviders(ctx, req.GetWorkspace(), o, nil)
		if err != nil {
			return nil, shoal.GRPCStatus(err)
		}
		// Records that do not decode are skipped by the list; the report
		// names them, or a rotation would look complete while they wait.
		resp.Skipped = append(resp.Skipped, page.Warnings...)
		for _, p := range page.Items {
			changed, err := s.cfg.Store.RotateCredentials(ctx, p.Meta.Workspace, p.Meta.Name)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return nil, shoal.GRPCStatus(err)
				}
				resp.Failed = append(resp.Failed, fmt.Sprintf("%s/%s: %v", p.Meta.Workspace, p.Meta.Name, err))
			case changed:
				resp.Rewritten++
			default:
				resp.Current++
			}
		}
		if page.Next == nil {
			break
		}
		o = *page.Next
		o.Revision = 0 // each page from the latest state: a rotation takes a while
	}
	s.log.Info("rotated provider credentials", "key", resp.Key, "rewritten", resp.Rewritten, "current", resp.Current, "failed", len(resp.Failed), "skipped", len(resp.Skipped))
	return resp, nil
}
