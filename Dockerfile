# syntax=docker/dockerfile:1
# A small static image of csi-provisioner: built for x86_64-unknown-linux-musl (rustls + ring,
# no OpenSSL, no glibc), run from distroless/static as a non-root user.
#
#   docker build -t example.invalid/csi-provisioner:0.1.0 .
#
# See deploy/README.md for what was verified without a Docker engine.

ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
# ring compiles C and assembly for the target: musl-gcc comes from musl-tools.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The cache mounts keep the registry and target directory between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl \
        -p csi-provisioner --bin csi-provisioner \
 && cp target/x86_64-unknown-linux-musl/release/csi-provisioner /csi-provisioner

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="csi-provisioner" \
      org.opencontainers.image.description="Kubernetes CSI external-provisioner sidecar with storage capacity tracking (Rust)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /csi-provisioner /csi-provisioner
# distroless's nonroot user; see deploy/README.md about the driver socket's permissions.
USER 65532:65532
ENTRYPOINT ["/csi-provisioner"]
