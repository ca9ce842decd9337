//go:build linux

package ownthread

import (
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Every function handed to Go runs on a thread other than the
// main one, however the scheduler places goroutines: here 2,000 of them
// while every P is kept busy, and with the main thread itself locked by
// the test's goroutines in turn.
func TestGoNeverRunsOnTheMainThread(t *testing.T) {
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	defer func() { close(stop); busy.Wait() }()

	pid := unix.Getpid()
	const n = 2000
	tids := make(chan int, n)
	for range n {
		Go(func() { tids <- unix.Gettid() })
	}
	for range n {
		if tid := <-tids; tid == pid {
			t.Fatal("a function ran on the main thread")
		}
	}
}

// mainThreadRun is what runLocked did when called on the main thread (in
// TestMain, which init keeps there): which thread ran f.
var mainThreadRun struct {
	onMain bool // TestMain did run on the main thread
	tid    int
}

func init() { runtime.LockOSThread() } // the main goroutine stays on the main thread

func TestMain(m *testing.M) {
	mainThreadRun.onMain = unix.Gettid() == unix.Getpid()
	ran := make(chan int, 1)
	started := make(chan struct{})
	runLocked(func() { ran <- unix.Gettid() }, started)
	<-started
	mainThreadRun.tid = <-ran
	m.Run()
}

// Called on the main thread itself, runLocked hands the function to
// another thread and returns with the main thread unchanged.
func TestRunLockedOnTheMainThread(t *testing.T) {
	if !mainThreadRun.onMain {
		t.Fatal("TestMain did not run on the main thread")
	}
	if mainThreadRun.tid == unix.Getpid() || mainThreadRun.tid == 0 {
		t.Fatalf("the function ran on thread %d (main %d)", mainThreadRun.tid, unix.Getpid())
	}
}
