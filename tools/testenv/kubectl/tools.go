//go:build tools

// Package tools pins kubectl, which tests use as users do (`kubectl apply`).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
