// Package examples holds recipes, one file each (Kubernetes Jobs, an Argo
// Rollouts AnalysisTemplate, a Flagger canary webhook, a GitHub workflow
// for a GitOps rollout, a GitLab CI job), and the test that checks every
// one parses as what it claims to be and that the rollprobe command lines in
// it are ones rollprobe accepts. The lab's end-to-end test runs the Jobs.
package examples
