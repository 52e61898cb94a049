// Package deploy holds what is needed to run shoal outside `go test`
// (docs/deploy.md walks through it):
//
//   - image/: the default sandbox image, busybox on scratch (make image);
//   - node/: the node image shoal/node:dev, the static binary on scratch
//     (make node-image);
//   - compose/: three voters in containers on one host (make cluster,
//     make cluster-down) and the test that drives them;
//   - systemd/: the unit and environment files for voters and workers on
//     real hosts;
//   - apt-install.sh: installs the Debian packages a build needs when run
//     as root, and names them otherwise.
package deploy
