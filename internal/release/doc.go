// Package release has no code: its tests check what `make release-snapshot`
// leaves in dist/ the way users meet it. The archives and checksums, the
// krew manifest installed as krew installs it, the multi-platform image
// read by skopeo, and the GitHub Action (action.yml) run step by step in a
// simulated runner that installs from that dist/ as if it were a release.
//
// Without dist/ the tests skip; ROLLPROBE_REQUIRE_RELEASE=1 (CI) makes
// that a failure.
package release
