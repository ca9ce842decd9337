package prober

import (
	"strings"
	"testing"
	"unicode"

	"google.golang.org/grpc/codes"
)

// TestGRPCCodeNamesAreGRPCs ties the names rollprobe reports to grpc-go's
// codes: each number's name is grpc-go's in the protocol's upper snake
// case (doc/statuscodes.md), and every code grpc-go knows has one.
func TestGRPCCodeNamesAreGRPCs(t *testing.T) {
	snake := func(camel string) string {
		var b strings.Builder
		prev := ' '
		for _, r := range camel {
			if unicode.IsUpper(r) && unicode.IsLower(prev) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToUpper(r))
			prev = r
		}
		return b.String()
	}
	for c := codes.Code(0); ; c++ {
		goName := c.String()
		if strings.HasPrefix(goName, "Code(") { // beyond the known codes
			if int(c) != len(grpcCodes) {
				t.Errorf("grpc-go knows %d codes, rollprobe names %d", c, len(grpcCodes))
			}
			break
		}
		want := snake(goName)
		if c == codes.Canceled {
			want = "CANCELLED" // the protocol's spelling; grpc-go's Go name drops an L
		}
		if got := GRPCCodeName(int(c)); got != want {
			t.Errorf("code %d: rollprobe names it %s, grpc-go %s (%s)", c, got, goName, want)
		}
	}
	if grpcInternal != int(codes.Internal) || GRPCCodeName(17) != "CODE_17" || GRPCCodeName(-1) != "CODE_-1" {
		t.Errorf("grpcInternal %d, GRPCCodeName(17) %q, (-1) %q", grpcInternal, GRPCCodeName(17), GRPCCodeName(-1))
	}
}
