//go:build !race

package hpackdec

const raceEnabled = false
