// Package lab is shoal-lab, the binary of what proves shoal: the chaos
// suite and the soak (`shoal-lab chaos run|soak`, package chaos) and the
// fleet bench (`shoal-lab bench cluster`, package scale). They live apart
// from `shoal` so that the product does not link porcupine, gonum/plot and
// the fault proxies, nor pay for their init on every CLI call (docs/
// benchmarks.md, "shoal-lab split").
//
// The commands run on package cli's conventions (cli.RunTool): the same
// global flags, flag reordering, error printing, exit codes and version
// command as `shoal`. The nodes they start are the `shoal` binary, never
// shoal-lab: --shoal-binary, else the shoal next to shoal-lab, else shoal
// on PATH (binary.go). With --cluster that binary is copied into the FROM-
// scratch hosts image (package chaos/hosts), so it must be static, as
// `make build` builds it.
package lab
