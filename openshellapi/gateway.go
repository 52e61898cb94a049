package openshellapi

import (
	"context"

	openshellv1 "shoal/api/openshell/v1"
	"shoal/pki"
)

func (s *Server) health() openshellv1.ServiceStatus {
	if s.cfg.Liveness != nil && !s.cfg.Liveness.Held() {
		// Cut off from etcd: this node refuses sandbox calls until it
		// renews its lease (apiserver: live).
		return openshellv1.ServiceStatus_SERVICE_STATUS_UNHEALTHY
	}
	return openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY
}

// Health is this node's: HEALTHY while it holds its liveness lease.
func (s *Server) Health(context.Context, *openshellv1.HealthRequest) (*openshellv1.HealthResponse, error) {
	return &openshellv1.HealthResponse{Status: s.health(), Version: s.cfg.Version}, nil
}

// GetGatewayInfo names the node's runtime as its one compute driver.
func (s *Server) GetGatewayInfo(context.Context, *openshellv1.GetGatewayInfoRequest) (*openshellv1.GetGatewayInfoResponse, error) {
	return &openshellv1.GetGatewayInfoResponse{
		Status:         s.health(),
		GatewayVersion: s.cfg.Version,
		ComputeDrivers: []*openshellv1.ComputeDriverInfo{{
			Name:         s.cfg.Driver,
			Capabilities: &openshellv1.ComputeDriverCapabilities{DriverName: s.cfg.Driver, DriverVersion: s.cfg.Version},
		}},
	}, nil
}

// Identity providers GetCurrentUser reports.
const (
	IdentityMTLS  = "mtls"
	IdentityLocal = "local"
)

// GetCurrentUser is the caller as shoal authenticated it: its client
// certificate's subject and role, or, on a plaintext loopback node (which
// authorizes every call), the local user with the admin role.
func (s *Server) GetCurrentUser(ctx context.Context, _ *openshellv1.GetCurrentUserRequest) (*openshellv1.GetCurrentUserResponse, error) {
	id, secure, err := s.api.Caller(ctx)
	if err != nil {
		return nil, grpcError(err, false)
	}
	if !secure {
		return &openshellv1.GetCurrentUserResponse{Subject: IdentityLocal, DisplayName: "local user (plaintext loopback)",
			Roles: []string{string(pki.RoleAdmin)}, IdentityProvider: IdentityLocal}, nil
	}
	return &openshellv1.GetCurrentUserResponse{Subject: id.Subject, DisplayName: id.Subject,
		Roles: []string{string(id.Role)}, IdentityProvider: IdentityMTLS}, nil
}

// admin says whether the caller may act on every workspace at once:
// an admin's certificate, or a plaintext loopback node.
func (s *Server) admin(ctx context.Context) (bool, error) {
	id, secure, err := s.api.Caller(ctx)
	if err != nil {
		return false, err
	}
	return !secure || id.Role == pki.RoleAdmin, nil
}
