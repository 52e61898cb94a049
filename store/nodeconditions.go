package store

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"shoal"
	shoalv1 "shoal/api/shoal/v1"
	"shoal/placement"
)

// ConditionEngineUnavailable is the node condition a node publishes with
// its registration while its container engine does not answer: "True"
// since the engine stopped answering for longer than the node's
// --engine-grace. Placement skips such a node (package placement).
const ConditionEngineUnavailable = placement.ConditionEngineUnavailable

// ConditionEngineReachable is the sandbox condition an agent sets on its
// sandboxes when its engine stops answering ("False": the container's
// state is not known, the phase is UNKNOWN) and when it answers again.
const ConditionEngineReachable = "EngineReachable"

// NodeCondition returns the node's condition of type typ, or nil.
func NodeCondition(n *shoalv1.Node, typ string) *shoalv1.Condition {
	for _, c := range n.GetConditions() {
		if c.Type == typ {
			return c
		}
	}
	return nil
}

// SetNodeCondition sets a node condition, moving its transition time only
// when its status changes (as SetCondition does for sandboxes).
func SetNodeCondition(n *shoalv1.Node, typ, status, reason, msg string) {
	if c := NodeCondition(n, typ); c != nil {
		if c.Status != status {
			c.LastTransitionTime = timestamppb.Now()
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	n.Conditions = append(n.Conditions, &shoalv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: timestamppb.Now()})
}

// UpdateRegistration rewrites a registered node's entry (its conditions),
// on the lease it registered with: the Txn compares the registry key still
// on that lease, so a node that lost its registration cannot bring its
// key back this way (it registers again, with the same entry). It is
// FAILED_PRECONDITION when the key is gone or on another lease.
func (s *Store) UpdateRegistration(ctx context.Context, r Registration, lease clientv3.LeaseID) error {
	n, val, err := r.value()
	if err != nil {
		return err
	}
	key, info := s.k.node(n.Name), s.k.nodeInfo(n.Name)
	resp, err := s.txn(ctx, "update node registration", key,
		[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", lease), clientv3.Compare(clientv3.CreateRevision(key), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(key, string(val), clientv3.WithLease(lease)), clientv3.OpPut(info, string(val))}, nil)
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return shoal.FailedPrecondition("node %q is not registered on lease %x (it lost its registration; it registers again with this entry)", n.Name, int64(lease))
	}
	return nil
}
