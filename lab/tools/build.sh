#!/usr/bin/env bash
# Builds the lab's real components into a cache outside the repository and
# prints the directory holding them:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
#   kubelet, kubectl                    (this module, k8s.io/kubernetes v1.36.3)
#   containerd/{containerd,containerd-shim-runc-v2,ctr}   (./containerd, v2.1.4)
#   cni/{bridge,host-local,loopback,portmap}              (./cni, plugins v1.7.1)
#   coredns                             (./coredns, v1.15.0: the cluster DNS,
#                                        with the plugins the lab's Corefile uses)
#   traefik, crds/                      (Traefik v3.6.12, the ingress and Gateway
#                                        controller, with its CRDs and the
#                                        Gateway API v1.4.0 standard CRDs;
#                                        built without what the lab never
#                                        runs: trim_traefik)
#   rollouts-controller, argo-crds/     (Argo Rollouts v1.10.1, with its CRDs)
# runc comes from Debian (it needs cgo); make lab-deps installs it.
#
# The cache key is the content of the three modules' go.mod and go.sum, so a
# version bump rebuilds and an unchanged pin reuses the binaries (a cold build
# took 32 minutes on 2 idle cores with CoreDNS and Traefik, before CoreDNS
# was trimmed; each binary is cached as soon as it is built).
# The edge components (CoreDNS, Traefik) carry a stamp of their own pin next
# to the binary, so bumping one rebuilds only it.
#
# Usage: lab/tools/build.sh            -> prints the binary directory on stdout
# Env:   ROLLPROBE_CACHE (default $HOME/.cache/rollprobe)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ROLLPROBE_CACHE:-$HOME/.cache/rollprobe}
key=$(cat "$here"/go.mod "$here"/go.sum "$here"/containerd/go.mod "$here"/containerd/go.sum \
  "$here"/cni/go.mod "$here"/cni/go.sum | sha256sum | cut -c1-16)
out="$cache/lab-bins/$key"

# The Kubernetes binaries report the version they were built from (the Node's
# kubeletVersion, kubectl version); without these flags they say v0.0.0-master.
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

# The compiler emits no DWARF: -s -w strip it from every binary anyway, and
# making it was about a tenth of the compile's CPU (CoreDNS from an empty
# build cache on 2 idle cores, 2026-12-07: 143 s of user CPU with it, 127
# without; the binaries the same size). The lab's binaries are CPU-bound
# in a cold CI run: both cores for 12 to 33 minutes by the machine
# (docs/lab.md).
gcflags="all=-dwarf=false"

# name  module-dir  package  extra-ldflags  build-tags
targets=(
  "etcd|.|go.etcd.io/etcd/server/v3||"
  "kube-apiserver|.|k8s.io/kubernetes/cmd/kube-apiserver|$k8s_ldflags|"
  "kube-controller-manager|.|k8s.io/kubernetes/cmd/kube-controller-manager|$k8s_ldflags|"
  "kube-scheduler|.|k8s.io/kubernetes/cmd/kube-scheduler|$k8s_ldflags|"
  "kube-proxy|.|k8s.io/kubernetes/cmd/kube-proxy|$k8s_ldflags|"
  "kubelet|.|k8s.io/kubernetes/cmd/kubelet|$k8s_ldflags|"
  "kubectl|.|k8s.io/kubernetes/cmd/kubectl|$k8s_ldflags|"
  "containerd/containerd|containerd|github.com/containerd/containerd/v2/cmd/containerd||no_btrfs,no_devmapper,no_zfs"
  "containerd/containerd-shim-runc-v2|containerd|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2||no_btrfs,no_devmapper,no_zfs"
  "containerd/ctr|containerd|github.com/containerd/containerd/v2/cmd/ctr||no_btrfs,no_devmapper,no_zfs"
  "cni/bridge|cni|github.com/containernetworking/plugins/plugins/main/bridge||"
  "cni/host-local|cni|github.com/containernetworking/plugins/plugins/ipam/host-local||"
  "cni/loopback|cni|github.com/containernetworking/plugins/plugins/main/loopback||"
  "cni/portmap|cni|github.com/containernetworking/plugins/plugins/meta/portmap||"
)

# The edge (CoreDNS, Traefik) and Argo Rollouts: each binary carries a
# stamp of its pin.
coredns_stamp=$(cat "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go" | sha256sum | cut -c1-16)
# Traefik's go.mod has replace directives, which apply only to the main
# module: it is built inside a copy of its own module (the module cache is
# read-only). Its CRDs and the Gateway API's standard ones come from the same
# module downloads, so the lab applies exactly what this version expects.
traefik_version=v3.6.12
gateway_api_version=v1.4.0
traefik_trim="trim: acme-dns ecs" # what trim_traefik leaves out: part of the stamp
traefik_stamp="traefik $traefik_version gateway-api $gateway_api_version $traefik_trim"
traefik_src="$cache/src/traefik-$traefik_version"
# Argo Rollouts' go.mod has replace directives too: built the same way.
# v1.10.2 needs a newer Go than this project's.
argo_version=v1.10.1
argo_stamp="argo-rollouts $argo_version"
argo_src="$cache/src/argo-rollouts-$argo_version"

# stale NAME STAMP: the binary is missing or was built from another pin.
stale() { ! [ -x "$out/$1" ] || [ "$(cat "$out/$1.stamp" 2>/dev/null)" != "$2" ]; }
# moddir MODULE@VERSION: downloads it and prints its directory.
moddir() {
  local j
  j=$(GOFLAGS= go mod download -json "$1") || { echo "lab-bins: go mod download $1: $j" >&2; return 1; }
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$j"
}

mkdir -p "$out/containerd" "$out/cni"

# edge NAME STAMP BUILD: builds $out/NAME with the function BUILD unless the
# binary is there with the same stamp.
edge() {
  local name=$1 stamp=$2 build=$3
  if ! stale "$name" "$stamp"; then
    echo "lab-bins: $name cached" >&2
    return
  fi
  echo "lab-bins: building $name ..." >&2
  local start=$SECONDS
  rm -f "$out/$name.stamp"
  "$build"
  mv "$out/$name.tmp" "$out/$name"
  echo "$stamp" >"$out/$name.stamp"
  echo "lab-bins: $name built in $((SECONDS - start))s" >&2
}

build_coredns() {
  (cd "$here/coredns" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -gcflags="$gcflags" -ldflags="-s -w" \
    -o "$out/coredns.tmp" .)
}

# trim_traefik DIR: leaves out of the copy of Traefik's source in DIR two
# parts the lab never uses that are most of its build: the ACME DNS-01
# challenge's providers (lego's providers/dns imports the SDK of every DNS
# host it supports: 44 of Traefik's 145 MB of Go source, 847 of its 2,495
# packages) and the AWS ECS provider (the EC2, ECS and SSM SDKs: 21 MB more).
# The lab's Traefik reads Kubernetes (Ingress, CRDs, Gateway API) and serves
# TLS from a Secret; asked for either, this build says it lacks it. A pin
# whose source no longer matches fails here, loudly, rather than building
# all of it.
trim_traefik() {
  local dir=$1 acme=$1/pkg/provider/acme/provider.go
  local import=$'\t"github.com/go-acme/lego/v4/providers/dns"'
  local call='provider, err = dns.NewDNSChallengeProviderByName(p.DNSChallenge.Provider)'
  if [ "$(grep -cxF "$import" "$acme")" != 1 ] || [ "$(grep -cF "$call" "$acme")" != 1 ] ||
    ! grep -qx 'type Provider struct {' "$dir/pkg/provider/ecs/ecs.go"; then
    echo "lab-bins: Traefik $traefik_version's source is not what trim_traefik expects: update it" >&2
    return 1
  fi
  grep -vxF "$import" "$acme" |
    sed "s|$call|provider, err = nil, fmt.Errorf(\"DNS challenge provider %q: not built into the lab's Traefik\", p.DNSChallenge.Provider)|" >"$acme.new"
  mv "$acme.new" "$acme"
  find "$dir/pkg/provider/ecs" -maxdepth 1 -name '*.go' -delete
  cat >"$dir/pkg/provider/ecs/ecs.go" <<'GO'
// Package ecs stands in for Traefik's AWS ECS provider, left out of the
// lab's build (rollprobe's lab/tools/build.sh).
package ecs

import (
	"errors"

	"github.com/traefik/traefik/v3/pkg/config/dynamic"
	"github.com/traefik/traefik/v3/pkg/safe"
)

var errNotBuilt = errors.New("the ECS provider is not built into the lab's Traefik")

// Provider has no options: the static configuration only names it.
type Provider struct{}

// SetDefaults does nothing.
func (p *Provider) SetDefaults() {}

// Init fails: the provider is not built.
func (p *Provider) Init() error { return errNotBuilt }

// Provide fails: the provider is not built.
func (p *Provider) Provide(chan<- dynamic.Message, *safe.Pool) error { return errNotBuilt }
GO
}

build_traefik() {
  local src gw
  src=$(moddir "github.com/traefik/traefik/v3@$traefik_version")
  gw=$(moddir "sigs.k8s.io/gateway-api@$gateway_api_version")
  rm -rf "$traefik_src" && mkdir -p "$(dirname "$traefik_src")" && cp -r "$src" "$traefik_src" && chmod -R u+w "$traefik_src"
  trim_traefik "$traefik_src"
  (cd "$traefik_src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -gcflags="$gcflags" \
    -ldflags="-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$traefik_version" \
    -o "$out/traefik.tmp" ./cmd/traefik)
  rm -rf "$out/crds" && mkdir -p "$out/crds"
  cp "$src/integration/fixtures/k8s/01-traefik-crd.yml" "$out/crds/traefik.yaml"
  for f in "$gw"/config/crd/standard/gateway.networking.k8s.io_*.yaml; do
    cp "$f" "$out/crds/$(basename "$f")"
  done
  chmod -R u+w "$out/crds"
  rm -rf "$traefik_src"
}

build_argo() {
  local src
  src=$(moddir "github.com/argoproj/argo-rollouts@$argo_version")
  rm -rf "$argo_src" && mkdir -p "$(dirname "$argo_src")" && cp -r "$src" "$argo_src" && chmod -R u+w "$argo_src"
  (cd "$argo_src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -gcflags="$gcflags" \
    -ldflags="-s -w -X github.com/argoproj/argo-rollouts/utils/version.version=${argo_version#v}" \
    -o "$out/rollouts-controller.tmp" ./cmd/rollouts-controller)
  rm -rf "$out/argo-crds" && mkdir -p "$out/argo-crds"
  cp "$src"/manifests/crds/*-crd.yaml "$out/argo-crds/"
  chmod -R u+w "$out/argo-crds"
  rm -rf "$argo_src"
}

# The edge builds in the background while the Kubernetes components build
# in the foreground: on 2 cores, one build's module downloads and
# single-threaded links leave room for the other's compiles. Its progress
# is shown when it is done.
(
  edge coredns "$coredns_stamp" build_coredns
  edge traefik "$traefik_stamp" build_traefik
  edge rollouts-controller "$argo_stamp" build_argo
) >"$cache/lab-bins/edge.log" 2>&1 &
edge_pid=$!

for t in "${targets[@]}"; do
  IFS='|' read -r name dir pkg ldflags tags <<<"$t"
  if [ -x "$out/$name" ]; then
    echo "lab-bins: $name cached" >&2
    continue
  fi
  echo "lab-bins: building $name ($pkg) ..." >&2
  start=$SECONDS
  # Build to a temporary name and rename, so an interrupted build never leaves
  # a truncated binary that a later run would take as cached.
  (cd "$here/$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -gcflags="$gcflags" -tags "$tags" \
    -ldflags="-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "lab-bins: $name built in $((SECONDS - start))s" >&2
done
edge_ok=0
wait "$edge_pid" || edge_ok=$?
cat "$cache/lab-bins/edge.log" >&2
if [ "$edge_ok" -ne 0 ]; then
  echo "lab-bins: building the edge (CoreDNS, Traefik, Argo Rollouts) failed" >&2
  exit 1
fi
echo "$out"
