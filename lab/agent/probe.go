package agent

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probe runs the container's startup, readiness and liveness probes for the
// life of one process. Readiness keeps running while the pod terminates, as
// on a real kubelet: a terminating pod whose readiness still passes stays
// serving in its EndpointSlice.
func (c *container) probe(ctx context.Context) {
	if p := c.spec.StartupProbe; p != nil {
		if !c.probeUntil(ctx, p, true) {
			c.r.log.Info("startup probe failed, killing", "container", c.spec.Name)
			c.kill()
			return
		}
		c.mu.Lock()
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
		c.mu.Unlock()
		c.r.containerChanged(ctx)
	}
	if p := c.spec.LivenessProbe; p != nil {
		go func() {
			if !c.probeUntil(ctx, p, false) && ctx.Err() == nil {
				c.r.log.Info("liveness probe failed, killing", "container", c.spec.Name)
				c.kill()
			}
		}()
	}
	p := c.spec.ReadinessProbe
	if p == nil {
		return
	}
	success, failure := thresholds(p)
	var okRun, failRun int32
	c.sleep(ctx, time.Duration(p.InitialDelaySeconds)*time.Second)
	for ctx.Err() == nil {
		err := c.runProbe(ctx, p)
		if err == nil {
			okRun, failRun = okRun+1, 0
		} else {
			okRun, failRun = 0, failRun+1
		}
		c.mu.Lock()
		was := c.ready
		switch {
		case !was && okRun >= success:
			c.ready = true
		case was && failRun >= failure:
			c.ready = false
		}
		now := c.ready
		c.mu.Unlock()
		if now != was {
			c.r.log.Info("readiness", "container", c.spec.Name, "ready", now, "err", err)
			c.r.containerChanged(ctx)
		}
		c.sleep(ctx, period(p))
	}
}

// probeUntil runs p until it succeeds successThreshold times in a row
// (wantSuccess, a startup probe) or fails failureThreshold times in a row.
// It reports whether the probe ended in success.
func (c *container) probeUntil(ctx context.Context, p *corev1.Probe, wantSuccess bool) bool {
	success, failure := thresholds(p)
	var okRun, failRun int32
	c.sleep(ctx, time.Duration(p.InitialDelaySeconds)*time.Second)
	for ctx.Err() == nil {
		if c.runProbe(ctx, p) == nil {
			okRun, failRun = okRun+1, 0
			if wantSuccess && okRun >= success {
				return true
			}
		} else {
			okRun, failRun = 0, failRun+1
			if failRun >= failure {
				return false
			}
		}
		c.sleep(ctx, period(p))
	}
	return false
}

func (c *container) runProbe(ctx context.Context, p *corev1.Probe) error {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		return c.httpGet(pctx, p.HTTPGet)
	case p.TCPSocket != nil:
		return c.tcpConnect(pctx, p.TCPSocket.Port)
	case p.Exec != nil:
		return c.execInPod(pctx, p.Exec.Command)
	}
	return errors.New("unsupported probe (grpc is not implemented in the lab)")
}

func (c *container) kill() {
	c.mu.Lock()
	proc := c.proc
	c.mu.Unlock()
	if proc != nil {
		_ = proc.Kill()
	}
}

func (c *container) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func thresholds(p *corev1.Probe) (success, failure int32) {
	success, failure = p.SuccessThreshold, p.FailureThreshold
	if success < 1 {
		success = 1
	}
	if failure < 1 {
		failure = 3
	}
	return success, failure
}

func period(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds < 1 {
		return 10 * time.Second
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}
