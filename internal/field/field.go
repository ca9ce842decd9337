// Package field is how domain packages report a bad configuration value
// without knowing the command line: an Error names the configuration field
// (as the domain calls it), and the command that filled the field renames
// it to the flag the user typed. Domain packages never name flags.
package field

import (
	"errors"
	"fmt"
	"strings"
)

// Error is one bad value of one field.
type Error struct {
	Field   string // the domain's name of the field, e.g. "Timeout"
	Value   string // the value as the user wrote it, "" to show none
	Problem string // what is wrong, e.g. "must be positive"
	// Other, when set, is a second field the problem is with (renamed as
	// Field is); Problem names it with OtherPlaceholder.
	Other string
}

// OtherPlaceholder stands for Error.Other in Error.Problem.
const OtherPlaceholder = "{other}"

func (e *Error) Error() string {
	problem := strings.ReplaceAll(e.Problem, OtherPlaceholder, e.Other)
	if e.Value == "" {
		return e.Field + ": " + problem
	}
	return fmt.Sprintf("%s %s: %s", e.Field, e.Value, problem)
}

// Conflict reports a value of a field that conflicts with another field's;
// problem names the other with OtherPlaceholder.
func Conflict(name string, value any, other, problem string) *Error {
	return &Error{Field: name, Value: fmt.Sprint(value), Other: other, Problem: problem}
}

// Invalid reports a bad value of a field; value is formatted with %v.
func Invalid(name string, value any, problem string) *Error {
	return &Error{Field: name, Value: fmt.Sprint(value), Problem: problem}
}

// Missing reports a required field without a value.
func Missing(name, problem string) *Error {
	return &Error{Field: name, Problem: problem}
}

// Rename rewrites the field names of every *Error in err (a single error,
// or a tree of errors.Join and %w wrappers) with names, e.g. Timeout ->
// --request-timeout. Names not in the map are kept; other errors pass
// through unchanged.
func Rename(err error, names map[string]string) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) && err == error(fe) {
		renamed := *fe
		if flag, ok := names[fe.Field]; ok {
			renamed.Field = flag
		}
		if flag, ok := names[fe.Other]; ok {
			renamed.Other = flag
		}
		return &renamed
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, Rename(e, names))
		}
		return errors.Join(out...)
	}
	return err
}
