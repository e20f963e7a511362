// Command node-registrar tells the test environment's real kubelet about a CSI driver through
// kubelet's plugin registration API, as node-driver-registrar does in a cluster (the Go module
// proxy refuses to serve that one). Go, not Rust: kubelet dials the registration socket with its
// file path as the HTTP/2 :authority, which the Rust HTTP/2 server rejects (PROTOCOL_ERROR).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var version = "dev"

// server answers kubelet's two registration calls for one driver.
type server struct {
	registration.UnimplementedRegistrationServer
	driver   string
	endpoint string
	rejected chan string
}

func (s *server) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              s.driver,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *server) NotifyRegistrationStatus(_ context.Context, st *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		log.Printf("kubelet registered driver %s", s.driver)
	} else {
		// Exit, as node-driver-registrar does, so that whoever runs us sees the failure.
		s.rejected <- st.Error
	}
	return &registration.RegistrationStatusResponse{}, nil
}

// driverName asks the driver at address for its name, until it answers or wait runs out (the
// driver may start after us).
func driverName(address string, wait time.Duration) (string, error) {
	path := strings.TrimPrefix(address, "unix://")
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil && info.GetName() != "" {
			return info.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no driver name from GetPluginInfo on %s after %s: %v", path, wait, err)
		}
		time.Sleep(time.Second)
	}
}

func main() {
	csiAddress := flag.String("csi-address", "/run/csi/socket", "the CSI driver's socket (path or unix:// URL)")
	kubeletPath := flag.String("kubelet-registration-path", "", "the driver's socket as kubelet sees it (absolute)")
	registrationDir := flag.String("plugin-registration-path", "/registration", "kubelet's plugins_registry directory")
	wait := flag.Duration("connection-timeout", time.Minute, "how long to wait for the driver to answer")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	if !filepath.IsAbs(*kubeletPath) {
		log.Fatalf("--kubelet-registration-path must be an absolute path, got %q", *kubeletPath)
	}
	name, err := driverName(*csiAddress, *wait)
	if err != nil {
		log.Fatal(err)
	}
	if strings.ContainsRune(name, '/') || name == "." || name == ".." {
		log.Fatalf("driver name %q cannot name a socket file", name)
	}
	socket := filepath.Join(*registrationDir, name+"-reg.sock")
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Fatalf("removing the stale socket %s: %v", socket, err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listening on %s (--plugin-registration-path): %v", socket, err)
	}
	srv := &server{driver: name, endpoint: *kubeletPath, rejected: make(chan string, 1)}
	grpcServer := grpc.NewServer()
	registration.RegisterRegistrationServer(grpcServer, srv)
	go func() {
		if err := grpcServer.Serve(listener); err != nil {
			log.Printf("serving %s: %v", socket, err)
		}
	}()
	log.Printf("serving registration of driver %s on %s", name, socket)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case sig := <-signals:
		log.Printf("%s: stopping", sig)
	case reason := <-srv.rejected:
		log.Printf("kubelet refused driver %s: %s", name, reason)
		code = 1
	}
	// kubelet deregisters the driver when its socket goes.
	grpcServer.Stop()
	_ = os.Remove(socket)
	os.Exit(code)
}
