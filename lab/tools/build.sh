#!/usr/bin/env bash
# Builds the lab's real components into a cache outside the repository and
# prints the directory holding them:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
#   kubelet, kubectl                    (this module, k8s.io/kubernetes v1.36.3)
#   containerd/{containerd,containerd-shim-runc-v2,ctr}   (./containerd, v2.1.4)
#   cni/{bridge,host-local,loopback,portmap}              (./cni, plugins v1.7.1)
# runc comes from Debian (it needs cgo); make lab-deps installs it.
#
# The cache key is the content of the three modules' go.mod and go.sum, so a
# version bump rebuilds and an unchanged pin reuses the binaries (a cold build
# takes ~12 minutes on 2 cores; each binary is cached as soon as it is built).
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
mkdir -p "$out/containerd" "$out/cni"
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
  (cd "$here/$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -tags "$tags" \
    -ldflags="-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "lab-bins: $name built in $((SECONDS - start))s" >&2
done
echo "$out"
