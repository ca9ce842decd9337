package lab_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/rollprobe/rollprobe/internal/capture"
	"github.com/rollprobe/rollprobe/lab"
	"github.com/rollprobe/rollprobe/report"
)

// testExamples runs the Job recipes of examples/ in the lab, on the
// release image the lab imports (rollprobe/rollprobe): job-probe gates a
// rollout on its exit code (a graceful one passes, a naive one fails with
// exit 1), and job-run runs rollprobe run from inside the cluster with the
// in-cluster configuration and exactly deploy/rbac.yaml's permissions.
// The graceful runs are judged as checkClean judges any (heldJob).
func testExamples(t *testing.T, ctx context.Context, c *lab.Client) {
	apply(t, "graceful") // as testProbers: right however the run suite ended
	for _, tc := range []struct {
		sample   string
		wantExit int32
	}{{"graceful", 0}, {"naive", 1}} {
		t.Run("job-probe gates "+tc.sample, func(t *testing.T) {
			ensureSample(t, ctx, c, tc.sample)
			// The recipe's target is a Service's short name, resolved
			// by the cluster's DNS in the Job's namespace: only the name
			// changes, to the sample's.
			job := exampleJob(t, "job-probe.yaml", "probe-"+tc.sample, func(args []string) []string {
				if args[1] != "http://web/" {
					t.Fatalf("job-probe's target is %q, not the short name this test renames", args[1])
				}
				args[1] = "http://" + tc.sample + "/"
				return replaceFlag(args, "--duration", "20s")
			})
			var held *heldJob
			if tc.wantExit == 0 {
				held = holdJobToTheWire(t, job)
			}
			createJob(t, ctx, c, job)
			waitJobRunning(t, ctx, c, job.Name)
			time.Sleep(2 * time.Second) // the probe's first requests before the rollout
			restart(t, ctx, c, tc.sample)
			exit, logs := waitJobDone(t, ctx, c, job.Name, 2*time.Minute)
			if held != nil {
				held.check(t, exit, logs)
			} else if exit != tc.wantExit {
				t.Fatalf("%s: the Job's container exited %d, want %d\n%s", tc.sample, exit, tc.wantExit, logs)
			}
			if exit == 1 && !strings.Contains(logs, "verdict: FAIL (exit 1)") {
				t.Errorf("the log should carry the verdict:\n%s", logs)
			}
			waitRollout(t, ctx, c, tc.sample)
		})
	}

	t.Run("job-run rolls graceful from inside the cluster", func(t *testing.T) {
		ensureSample(t, ctx, c, "graceful")
		rbac, err := filepath.Abs("../deploy/rbac.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// The RBAC test takes permissions away at its end: apply it whole.
		if out, err := rollprobe(t, "lab", "exec", "--state-dir", stateDir, "--", "kubectl", "apply", "-n", "default", "-f", rbac); err != nil {
			t.Fatalf("apply rbac: %v\n%s", err, out)
		}
		job := exampleJob(t, "job-run.yaml", "run-graceful", func(args []string) []string {
			args = replaceFlag(args, "--deployment", "graceful")
			args = replaceFlag(args, "--target", "http://graceful/")
			return append(args, "--baseline", "2s", "--settle", "2s")
		})
		held := holdJobToTheWire(t, job)
		createJob(t, ctx, c, job)
		exit, logs := waitJobDone(t, ctx, c, job.Name, 3*time.Minute)
		if !strings.Contains(logs, "rollout complete") {
			t.Fatalf("exit %d, want a complete rollout\n%s", exit, logs)
		}
		r := held.check(t, exit, logs)
		if r.rep.Rollout == nil || r.rep.Rollout.Status != report.StatusComplete {
			t.Errorf("the Job's report says the rollout is %+v, want %s", r.rep.Rollout, report.StatusComplete)
		}
	})
}

// heldJob is a Job's run of a graceful rollout as checkClean judges any
// other: its report, written to the host through a hostPath volume, and
// the nodes' captures of resets and ICMP errors while it ran. A Job's
// prober sits behind its node's kube-proxy like any other client, and
// meets the nftables map race checkClean allows (a refusal the node's own
// rules made, held to the wire, exit 1); a Job's exit code alone cannot
// tell that from a pod's drop.
type heldJob struct {
	dir     string
	rejects []*capture.Capture
}

// holdJobToTheWire makes job write its report to a host directory (the
// lab's kubelets and the test share the host's file system) and starts
// the nodes' captures; call it before the Job is created.
func holdJobToTheWire(t *testing.T, job *batchv1.Job) *heldJob {
	t.Helper()
	dir := t.TempDir()
	// The image runs as a user of its own: the directory is the volume's
	// root in the container, and it writes a temporary file beside the
	// report.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec := &job.Spec.Template.Spec
	hostDir := corev1.HostPathDirectory
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "report",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "report", MountPath: "/report"})
	c.Args = replaceFlag(c.Args, "--report", "/report/report.json")
	return &heldJob{dir: dir, rejects: logRejectionsIfFailed(t)}
}

// check judges the Job's run as checkClean does and returns it.
func (h *heldJob) check(t *testing.T, exit int32, logs string) *runResult {
	t.Helper()
	out := &syncBuffer{}
	_, _ = out.Write([]byte(logs))
	r := &runResult{exit: int(exit), output: out, rejects: h.rejects, reportPath: filepath.Join(h.dir, "report.json")}
	if r.rep, r.repErr = report.ReadFile(r.reportPath); r.repErr != nil {
		t.Fatalf("the Job's report: %v (exit %d)\n%s", r.repErr, exit, logs)
	}
	checkClean(t, r)
	return r
}

// exampleJob reads a Job recipe and makes it runnable in the lab: its own
// name, the lab's tag of the release image, and args edited by edit.
func exampleJob(t *testing.T, file, name string, edit func([]string) []string) *batchv1.Job {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := obj.(*batchv1.Job)
	job.Name = "example-" + name
	c := &job.Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, lab.ReleaseRepo+":") {
		t.Fatalf("image %q is not the release image", c.Image)
	}
	c.Image = lab.ReleaseRepo + ":latest"
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.Args = edit(append([]string(nil), c.Args...))
	return job
}

func replaceFlag(args []string, flag, value string) []string {
	for i := range args[:len(args)-1] {
		if args[i] == flag {
			args[i+1] = value
			return args
		}
	}
	return append(args, flag, value)
}

func createJob(t *testing.T, ctx context.Context, c *lab.Client, job *batchv1.Job) {
	t.Helper()
	if _, err := c.Kube.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = c.Kube.BatchV1().Jobs("default").Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
}

func jobPod(ctx context.Context, c *lab.Client, job string) (*corev1.Pod, error) {
	pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		return nil, err
	}
	return &pods.Items[0], nil
}

func waitJobRunning(t *testing.T, ctx context.Context, c *lab.Client, job string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := jobPod(ctx, c, job)
		return err == nil && p != nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("job %s's pod is not running: %v", job, err)
	}
}

// waitJobDone waits for the Job's pod to end and returns its container's
// exit code and log, and checks the Job's own condition agrees: Complete
// for 0, Failed otherwise (what a pipeline gates on).
func waitJobDone(t *testing.T, ctx context.Context, c *lab.Client, job string, timeout time.Duration) (int32, string) {
	t.Helper()
	var exit int32 = -1
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := jobPod(ctx, c, job)
		if err != nil || p == nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		if term := p.Status.ContainerStatuses[0].State.Terminated; term != nil {
			exit = term.ExitCode
			return true, nil
		}
		return false, nil
	})
	p, _ := jobPod(ctx, c, job)
	logs := ""
	if p != nil {
		b, lerr := c.Kube.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		if lerr != nil {
			logs += fmt.Sprintf("(logs: %v)", lerr)
		}
	}
	if err != nil {
		t.Fatalf("job %s did not end: %v\n%s", job, err, logs)
	}
	want := batchv1.JobComplete
	if exit != 0 {
		want = batchv1.JobFailed
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := c.Kube.BatchV1().Jobs("default").Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == want && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("job %s: the container exited %d but the Job is not %s: %v", job, exit, want, err)
	}
	return exit, logs
}
