package fleet

import (
	"context"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// KubeStreams reaches prober pods through the API server, as kubectl
// attach and kubectl logs -f do: WebSocket first, SPDY where the server
// does not upgrade to it.
type KubeStreams struct {
	Kube      kubernetes.Interface
	Rest      *rest.Config
	Namespace string
}

// Attach attaches to the prober container's stdin and stdout.
func (k KubeStreams) Attach(ctx context.Context, pod string, stdin io.Reader, stdout io.Writer) error {
	req := k.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(k.Namespace).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: Container, Stdin: true, Stdout: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(k.Rest, "POST", req.URL())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(k.Rest, "GET", req.URL().String())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout})
}

// Logs follows the prober container's log from its start.
func (k KubeStreams) Logs(ctx context.Context, pod string) (io.ReadCloser, error) {
	return k.Kube.CoreV1().Pods(k.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: Container, Follow: true}).Stream(ctx)
}
