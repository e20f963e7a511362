//go:build tools

// Package tools pins csi-sanity, the CSI conformance test runner.
package tools

import (
	_ "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
)
