package render

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable is s with every control character but newline and tab shown
// escaped (\x1b, \u0085) and every byte that is not UTF-8 as \xNN: values
// from the server (a backend header, an error quoting its response) and
// from the cluster reach terminals, CI logs and Markdown through these
// renderings, and an escape sequence in them must be shown, never obeyed.
// The text and Markdown renderings pass their whole output through it;
// their own newlines and tabs are all they keep.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (isControl(r) && r != '\n' && r != '\t') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case isControl(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// isControl: C0, DEL and C1 (ECMA-48's control functions; C1's CSI,
// U+009B, starts escape sequences in some terminals too).
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }
