//go:build !linux

package engine

// atNice runs fn: only Linux keeps a priority per thread.
func atNice(nice int, fn func() error) error { return fn() }
