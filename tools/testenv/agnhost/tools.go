//go:build tools

// Package tools pins agnhost (the e2e suite's test image; imported package by package because its
// main package cannot be imported), built into the real node's agnhost image for `cargo xtask e2e`.
package tools

import (
	_ "github.com/spf13/cobra"
	_ "k8s.io/component-base/cli"
	_ "k8s.io/kubernetes/test/images/agnhost/audit-proxy"
	_ "k8s.io/kubernetes/test/images/agnhost/connect"
	_ "k8s.io/kubernetes/test/images/agnhost/crd-conversion-webhook"
	_ "k8s.io/kubernetes/test/images/agnhost/dns"
	_ "k8s.io/kubernetes/test/images/agnhost/entrypoint-tester"
	_ "k8s.io/kubernetes/test/images/agnhost/external-metrics"
	_ "k8s.io/kubernetes/test/images/agnhost/fakegitserver"
	_ "k8s.io/kubernetes/test/images/agnhost/fakeregistryserver"
	_ "k8s.io/kubernetes/test/images/agnhost/grpc-health-checking"
	_ "k8s.io/kubernetes/test/images/agnhost/guestbook"
	_ "k8s.io/kubernetes/test/images/agnhost/h2c-server"
	_ "k8s.io/kubernetes/test/images/agnhost/inclusterclient"
	_ "k8s.io/kubernetes/test/images/agnhost/liveness"
	_ "k8s.io/kubernetes/test/images/agnhost/logs-generator"
	_ "k8s.io/kubernetes/test/images/agnhost/mounttest"
	_ "k8s.io/kubernetes/test/images/agnhost/mtlsclient"
	_ "k8s.io/kubernetes/test/images/agnhost/mtlsserver"
	_ "k8s.io/kubernetes/test/images/agnhost/net"
	_ "k8s.io/kubernetes/test/images/agnhost/netexec"
	_ "k8s.io/kubernetes/test/images/agnhost/nettest"
	_ "k8s.io/kubernetes/test/images/agnhost/no-snat-test"
	_ "k8s.io/kubernetes/test/images/agnhost/no-snat-test-proxy"
	_ "k8s.io/kubernetes/test/images/agnhost/nonewprivs"
	_ "k8s.io/kubernetes/test/images/agnhost/openidmetadata"
	_ "k8s.io/kubernetes/test/images/agnhost/pause"
	_ "k8s.io/kubernetes/test/images/agnhost/podcertificatesigner"
	_ "k8s.io/kubernetes/test/images/agnhost/port-forward-tester"
	_ "k8s.io/kubernetes/test/images/agnhost/porter"
	_ "k8s.io/kubernetes/test/images/agnhost/resource-consumer-controller"
	_ "k8s.io/kubernetes/test/images/agnhost/serve-hostname"
	_ "k8s.io/kubernetes/test/images/agnhost/tcp-reset"
	_ "k8s.io/kubernetes/test/images/agnhost/test-webserver"
	_ "k8s.io/kubernetes/test/images/agnhost/webhook"
	_ "k8s.io/kubernetes/third_party/forked/vishhstress"
)
