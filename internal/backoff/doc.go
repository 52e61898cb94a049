// Package backoff is the one way shoal (servers, lab, harness and tools)
// waits between tries of something that failed: a Policy says how long each
// wait is (growing from Initial by Multiplier up to Max, with optional
// jitter) and how many tries there are; Retry runs a call under it until
// the call succeeds, returns a Permanent error, the tries run out, or the
// context ends. Sleep is the context-aware wait the loops share.
//
// Loops with a shape of their own (a stream reopened after a break, with
// the delay reset once it stayed healthy) keep their loop and ask the
// Policy for the delay of try n (Delay).
package backoff
