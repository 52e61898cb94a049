package apiserver

import (
	"context"

	shoalv1 "shoal/api/shoal/v1"
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
