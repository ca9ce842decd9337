// Command rollprobe proves that a Kubernetes rollout drops no requests.
package main

import (
	"os"

	"github.com/rollprobe/rollprobe/cmd"
)

func main() { os.Exit(cmd.Execute()) }
