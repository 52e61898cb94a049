package apiserver

import (
	"context"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/store"
)

// The node registry (store/nodes.go): every node answers from etcd.

func (c *ClusterServer) ListNodes(ctx context.Context, _ *shoalv1.ListNodesRequest) (*shoalv1.ListNodesResponse, error) {
	nodes, err := c.cfg.Store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return &shoalv1.ListNodesResponse{Items: nodes}, nil
}

func (c *ClusterServer) GetNode(ctx context.Context, req *shoalv1.GetNodeRequest) (*shoalv1.Node, error) {
	if err := validNodeName(req.Name); err != nil {
		return nil, err
	}
	return c.cfg.Store.GetNode(ctx, req.Name)
}

func (c *ClusterServer) CordonNode(ctx context.Context, req *shoalv1.CordonNodeRequest) (*shoalv1.Node, error) {
	if err := validNodeName(req.Name); err != nil {
		return nil, err
	}
	if err := c.cfg.Store.CordonNode(ctx, req.Name, req.Cordon); err != nil {
		return nil, err
	}
	return c.cfg.Store.GetNode(ctx, req.Name)
}

func validNodeName(name string) error { return validName("name", name) }

// RemoveNode forgets a NotReady node (store.ForgetNode) and requests the
// deletion of its sandboxes; they complete once the node's fence time has
// passed (store/deletion.go), and the leader forgets the node when none is
// left.
func (c *ClusterServer) RemoveNode(ctx context.Context, req *shoalv1.RemoveNodeRequest) (*shoalv1.RemoveNodeResponse, error) {
	if err := validNodeName(req.Name); err != nil {
		return nil, err
	}
	if err := c.cfg.Store.ForgetNode(ctx, req.Name); err != nil {
		return nil, err
	}
	names, err := c.sandboxesOn(ctx, req.Name, true, "node remove "+req.Name)
	if err != nil {
		return nil, err
	}
	return &shoalv1.RemoveNodeResponse{Sandboxes: names}, nil
}

// DrainNode cordons a node and, with delete, requests the deletion of
// every sandbox on it; it returns the sandboxes still there.
func (c *ClusterServer) DrainNode(ctx context.Context, req *shoalv1.DrainNodeRequest) (*shoalv1.DrainNodeResponse, error) {
	if err := validNodeName(req.Name); err != nil {
		return nil, err
	}
	if err := c.cfg.Store.CordonNode(ctx, req.Name, true); err != nil {
		return nil, err
	}
	names, err := c.sandboxesOn(ctx, req.Name, req.Delete, "node drain "+req.Name+" --delete")
	if err != nil {
		return nil, err
	}
	n, err := c.cfg.Store.GetNode(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return &shoalv1.DrainNodeResponse{Node: n, Sandboxes: names}, nil
}

// sandboxesOn lists the sandboxes of a node as "workspace/name" and, with
// del, requests the deletion of each that is not being deleted yet
// (through says how, for its DeleteRequested event).
func (c *ClusterServer) sandboxesOn(ctx context.Context, node string, del bool, through string) ([]string, error) {
	page, err := c.cfg.Store.ListSandboxes(ctx, "", store.ListOptions{}, func(sb *shoalv1.Sandbox) bool {
		return store.NodeOf(sb) == node
	})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(page.Items))
	for _, sb := range page.Items {
		m := sb.GetMeta()
		if del && m.GetDeletionTimestamp() == nil {
			marked, err := c.cfg.Store.MarkSandboxDeleting(ctx, m.Workspace, m.Name, store.Preconditions{UID: m.Uid})
			switch shoal.KindOf(err) {
			case shoal.KindNotFound, shoal.KindConflict:
				continue // gone or replaced meanwhile
			}
			if err != nil {
				return nil, err
			}
			recordDeleteRequested(ctx, c.cfg.Events, marked, through)
		}
		names = append(names, m.Workspace+"/"+m.Name)
	}
	return names, nil
}
