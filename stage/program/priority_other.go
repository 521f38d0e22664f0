//go:build !linux

package program

// AtNice runs fn: only Linux keeps a priority per thread.
func AtNice(nice int, fn func() error) error { return fn() }
