//go:build !linux

package prober

// Reading a socket's queued ICMP errors is Linux's (IP_RECVERR): elsewhere
// a failed connect's Result.DialICMP stays nil (not known).

func readDialICMP(int, bool, bool) *DialICMP { return nil }
func armDialICMP(int) bool                   { return false }
func disarmDialICMP(int)                     {}
func dupForICMP(int) int                     { return -1 }
func closeICMPFD(int)                        {}
