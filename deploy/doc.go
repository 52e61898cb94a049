// Package deploy holds what is needed to run shoal outside `go test`: the
// sandbox image build (image/) now, cluster deployment in a later issue.
package deploy
