package field

import (
	"errors"
	"testing"
)

func TestRename(t *testing.T) {
	err := errors.Join(Invalid("Timeout", "0s", "must be positive"), Missing("Target", "required"), errors.New("other"))
	got := Rename(err, map[string]string{"Timeout": "--request-timeout", "Target": "--target"}).Error()
	want := "--request-timeout 0s: must be positive\n--target: required\nother"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if Rename(nil, nil) != nil {
		t.Fatal("nil renamed to non-nil")
	}
	var fe *Error
	if !errors.As(Rename(Invalid("Rate", 1, "x"), nil), &fe) || fe.Field != "Rate" {
		t.Fatal("unmapped field changed")
	}
}
