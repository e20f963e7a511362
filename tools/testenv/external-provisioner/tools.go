//go:build tools

// Package tools pins the upstream Go external-provisioner, the benchmark baseline.
package tools

import (
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
)
