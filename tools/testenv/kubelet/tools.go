//go:build tools

// Package tools pins kubelet, which runs the test environment's one real node.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
