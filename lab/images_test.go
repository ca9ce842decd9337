package lab

import "testing"

// The names images are imported under are the ones the CRI looks up.
func TestFullImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"rollprobe/demoapp:v1":         "docker.io/rollprobe/demoapp:v1",
		"nginx:1.27":                   "docker.io/library/nginx:1.27",
		"localhost/lab/pause:1":        "localhost/lab/pause:1",
		"registry.example:5000/app:v2": "registry.example:5000/app:v2",
		"ghcr.io/org/app:latest":       "ghcr.io/org/app:latest",
	} {
		if got := fullImageName(ref); got != want {
			t.Errorf("%s: %s, want %s", ref, got, want)
		}
	}
}
