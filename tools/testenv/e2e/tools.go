//go:build tools

// Package tools pins Kubernetes' e2e suite (`go test -c k8s.io/kubernetes/test/e2e`), whose
// External Storage specs `cargo xtask e2e` runs against the real node.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e"
)
