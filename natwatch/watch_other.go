//go:build !linux

package natwatch

// Watch watches nothing off Linux: conntrack is Linux's.
func Watch(ports []uint16) (t *Table, stop func()) { return WatchWith(ports, Options{}) }

// WatchWith watches nothing off Linux.
func WatchWith(ports []uint16, o Options) (t *Table, stop func()) {
	t = NewTable()
	t.status.Reason = "conntrack is Linux's"
	return t, func() {}
}
