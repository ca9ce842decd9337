#!/usr/bin/env bash
# Builds the lab's real Kubernetes and etcd components into a cache outside the
# repository and prints the directory holding them. The cache key is the content
# of this module's go.mod and go.sum, so a version bump rebuilds and an unchanged
# pin reuses the binaries (a cold build takes ~8 minutes on 2 cores).
#
# Usage: lab/tools/build.sh            -> prints the binary directory on stdout
# Env:   ROLLPROBE_CACHE (default $HOME/.cache/rollprobe)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ROLLPROBE_CACHE:-$HOME/.cache/rollprobe}
key=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
out="$cache/lab-bins/$key"
bins=(etcd kube-apiserver kube-controller-manager kube-proxy kubectl)
declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kubectl]=k8s.io/kubernetes/cmd/kubectl # for rollprobe lab exec -- kubectl ..., and run --exec tests
)
mkdir -p "$out"
cd "$here"
for b in "${bins[@]}"; do
  if [ -x "$out/$b" ]; then
    echo "lab-bins: $b cached" >&2
    continue
  fi
  echo "lab-bins: building $b (${pkg[$b]}) ..." >&2
  start=$SECONDS
  # Build to a temporary name and rename, so an interrupted build never leaves
  # a truncated binary that a later run would take as cached.
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/$b.tmp" "${pkg[$b]}"
  mv "$out/$b.tmp" "$out/$b"
  echo "lab-bins: $b built in $((SECONDS - start))s" >&2
done
echo "$out"
