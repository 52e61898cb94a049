// Package apiserver implements the shoal.v1 gRPC service on top of the
// store and the node's container runtime.
//
// It validates every request before anything is written (validate.go),
// redacts credentials from every response, turns typed errors into gRPC
// status codes through shoal.GRPCStatus (one place), and implements the
// waits: CreateSandbox until READY, DeleteSandbox until the record is gone,
// DeleteProvider until the provider is gone. No handler retries a write
// itself: server-driven writes go through the store's update loop.
package apiserver
