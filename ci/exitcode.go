// Package ci turns a run into a CI verdict: exit codes (defined here and
// nowhere else), the budget check, and the machine-readable outputs.
package ci

import (
	"context"
	"errors"
	"fmt"
)

// ExitCode is the process exit status rollprobe promises CI systems.
type ExitCode int

const (
	// ExitOK: no failure above the budget.
	ExitOK ExitCode = 0
	// ExitFailures: failed requests above the budget.
	ExitFailures ExitCode = 1
	// ExitUsage: usage, configuration or preflight error; nothing was changed.
	ExitUsage ExitCode = 2
	// ExitRolloutFailed: the rollout failed or timed out.
	ExitRolloutFailed ExitCode = 3
	// ExitInconclusive: the prober could not hold its rate or hit local
	// resource errors, so the absence of failures proves nothing.
	ExitInconclusive ExitCode = 4
	// ExitInterrupted: stopped by SIGINT/SIGTERM; the report is still written.
	ExitInterrupted ExitCode = 130
)

func (c ExitCode) String() string {
	switch c {
	case ExitOK:
		return "pass"
	case ExitFailures:
		return "failures above budget"
	case ExitUsage:
		return "usage or preflight error"
	case ExitRolloutFailed:
		return "rollout failed"
	case ExitInconclusive:
		return "inconclusive"
	case ExitInterrupted:
		return "interrupted"
	}
	return fmt.Sprintf("exit %d", int(c))
}

// Error carries an exit code up to the root command, which resolves it once.
type Error struct {
	Code ExitCode
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Code.String()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// WithCode wraps err so that the process exits with code.
func WithCode(code ExitCode, err error) error { return &Error{Code: code, Err: err} }

// Usage marks err as a usage, configuration or preflight error (exit 2).
func Usage(err error) error { return WithCode(ExitUsage, err) }

// Silent is an *Error whose message has already been reported (the verdict
// printed with the report); the root command exits with its code and prints
// nothing more.
type Silent struct{ Code ExitCode }

func (s Silent) Error() string { return s.Code.String() }

// CodeOf resolves the exit code for an error returned by a command: nil is
// 0, an interruption is 130, a typed error keeps its code, and anything else
// (flag parsing, I/O before the run) is a usage error.
func CodeOf(err error) ExitCode {
	if err == nil {
		return ExitOK
	}
	var s Silent
	if errors.As(err, &s) {
		return s.Code
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	return ExitUsage
}
