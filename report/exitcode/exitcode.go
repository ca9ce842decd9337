// Package exitcode owns the process exit codes rollprobe promises CI systems
// (the model is k6's errext/exitcodes): a code travels up with its error,
// the innermost code wins, and the root command resolves it once with Of.
// It is a leaf: the report's verdict carries a Code, and anything that reads
// reports can name the codes without importing the rest of rollprobe.
package exitcode

import (
	"context"
	"errors"
	"fmt"
)

// Code is the process exit status.
type Code int

const (
	// OK: no failure above the budget.
	OK Code = 0
	// Failures: failed requests above the budget.
	Failures Code = 1
	// Usage: usage, configuration or preflight error; nothing was sent or changed.
	Usage Code = 2
	// RolloutFailed: the rollout failed or timed out.
	RolloutFailed Code = 3
	// Inconclusive: the prober could not hold its rate, hit local
	// resource errors, lost a prober, or was answered mostly by redirects
	// it was not told to expect, so the absence of failures proves nothing.
	Inconclusive Code = 4
	// OutputFailed: the run finished but an output (report, JUnit) could
	// not be written; the summary was still printed. Precedence: 130, 3,
	// 1, then this, then 4.
	OutputFailed Code = 5
	// Internal: rollprobe itself failed after the run began (a panic in
	// one of its goroutines, an engine that stopped on its own): the
	// report is still written and says so, and nothing it measured may be
	// trusted as proof. 70 is EX_SOFTWARE in BSD's sysexits.h. Never 2:
	// past the trigger something was changed, and Go's runtime exits 2 on
	// an unrecovered panic, which must not read as "nothing was changed".
	// Precedence: 130, then this, then 3, 1, 5, 4.
	Internal Code = 70
	// Interrupted: stopped by SIGINT/SIGTERM/SIGHUP; the report is still written.
	Interrupted Code = 130
)

// All is every code the program can exit with, in numeric order (the
// docs list each: a test keeps them equal).
var All = []Code{OK, Failures, Usage, RolloutFailed, Inconclusive, OutputFailed, Internal, Interrupted}

func (c Code) String() string {
	switch c {
	case OK:
		return "pass"
	case Failures:
		return "failures above budget"
	case Usage:
		return "usage or preflight error"
	case RolloutFailed:
		return "rollout failed"
	case Inconclusive:
		return "inconclusive"
	case OutputFailed:
		return "an output could not be written"
	case Internal:
		return "internal error"
	case Interrupted:
		return "interrupted"
	}
	return fmt.Sprintf("exit %d", int(c))
}

// Error carries an exit code up to the root command, which resolves it once.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Code.String()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// With wraps err so that the process exits with code.
func With(code Code, err error) error { return &Error{Code: code, Err: err} }

// UsageError marks err as a usage, configuration or preflight error (exit 2).
func UsageError(err error) error { return With(Usage, err) }

// InternalError marks err as rollprobe's own failure after the run began
// (exit 70).
func InternalError(err error) error { return With(Internal, err) }

// Silent is an error whose message has already been reported (the verdict
// printed with the report); the root command exits with its code and prints
// nothing more.
type Silent struct{ Code Code }

func (s Silent) Error() string { return s.Code.String() }

// Of resolves the exit code of an error returned by a command: nil is 0, a
// Silent error its code, an error carrying a code the innermost such code
// (the layer closest to what went wrong knows best; errors.As would find
// the outermost), an interruption 130, and anything else (flag parsing,
// I/O before the run) a usage error.
func Of(err error) Code {
	if err == nil {
		return OK
	}
	var s Silent
	if errors.As(err, &s) {
		return s.Code
	}
	if c, ok := innermost(err); ok {
		return c
	}
	if errors.Is(err, context.Canceled) {
		return Interrupted
	}
	return Usage
}

// innermost finds the code of the deepest *Error in err's chain (following
// Unwrap() error and Unwrap() []error, first match in a join).
func innermost(err error) (Code, bool) {
	var found Code
	ok := false
	for err != nil {
		if e, is := err.(*Error); is {
			found, ok = e.Code, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if c, in := innermost(inner); in {
					return c, true
				}
			}
			return found, ok
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return found, ok
		}
	}
	return found, ok
}

// WithOutputFailure is the exit code of a run whose verdict is code and
// one of whose outputs could not be written: the verdict's code when it
// takes precedence (interrupted, rollout failed, failures above budget),
// OutputFailed otherwise.
func WithOutputFailure(code Code) Code {
	switch code {
	case Interrupted, Internal, RolloutFailed, Failures:
		return code
	}
	return OutputFailed
}
