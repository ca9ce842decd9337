#!/usr/bin/env bash
# The action's install step: downloads the rollprobe release archive for
# this runner's OS and architecture, checks it against the release's
# checksums.txt, and puts the binary on the job's PATH.
#
# Env: ROLLPROBE_VERSION (v1.2.3 or 1.2.3), RUNNER_OS, RUNNER_ARCH,
# RUNNER_TEMP, GITHUB_PATH (set by the runner), and ROLLPROBE_RELEASE_URL,
# where the releases are (default GitHub's; any URL curl reads, file://
# included: the tests install from a local directory).
set -euo pipefail

fail() { echo "::error title=rollprobe install::$*"; exit 1; }

version=${ROLLPROBE_VERSION#v}
[ -n "$version" ] || fail "the version input is required, e.g. v1.2.3"
case "${RUNNER_OS:-$(uname -s)}" in
  Linux) os=linux ;;
  macOS | Darwin) os=darwin ;;
  *) fail "no rollprobe release for ${RUNNER_OS:-$(uname -s)}: linux and macOS only" ;;
esac
case "${RUNNER_ARCH:-$(uname -m)}" in
  X64 | x86_64 | amd64) arch=amd64 ;;
  ARM64 | aarch64 | arm64) arch=arm64 ;;
  *) fail "no rollprobe release for ${RUNNER_ARCH:-$(uname -m)}: amd64 and arm64 only" ;;
esac

base=${ROLLPROBE_RELEASE_URL:-https://github.com/rollprobe/rollprobe/releases/download}/v$version
archive=rollprobe_${version}_${os}_${arch}.tar.gz
dir=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/rollprobe-$version-$os-$arch
rm -rf "$dir"
mkdir -p "$dir"
for f in checksums.txt "$archive"; do
  curl -fsSL --retry 3 -o "$dir/$f" "$base/$f" || fail "cannot download $base/$f"
done

want=$(awk -v f="$archive" '$2 == f { print $1 }' "$dir/checksums.txt")
[ -n "$want" ] || fail "checksums.txt of v$version lists no $archive"
if command -v sha256sum >/dev/null; then
  got=$(sha256sum "$dir/$archive" | awk '{ print $1 }')
else
  got=$(shasum -a 256 "$dir/$archive" | awk '{ print $1 }') # macOS
fi
[ "$got" = "$want" ] || fail "$archive has sha256 $got, checksums.txt says $want: not installed"

tar -xzf "$dir/$archive" -C "$dir" rollprobe
rm -f "$dir/$archive"
echo "$dir" >>"${GITHUB_PATH:?GITHUB_PATH is not set: not on a GitHub runner}"
"$dir/rollprobe" version
