//go:build race

package hpackdec

// raceEnabled: the race detector's sync.Pool drops items on purpose, so
// x/net's Huffman decoder (pooled buffers) allocates at random under it.
const raceEnabled = true
