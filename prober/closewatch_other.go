//go:build !linux

package prober

import "sync/atomic"

// closeWatcher is Linux-only (epoll); elsewhere idle connections are checked
// with a peek before reuse (conn.peerClosed).
type closeWatcher struct{}

func newCloseWatcher() *closeWatcher                           { return nil }
func (w *closeWatcher) watch(fd int, flag *atomic.Bool) uint64 { return 0 }
func (w *closeWatcher) unwatch(token uint64)                   {}
func (w *closeWatcher) close()                                 {}
