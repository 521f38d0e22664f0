package testenv

import (
	"testing"

	"github.com/plumb-dev/plumb/auth"
)

// EditUsers changes a users file as `plumb user` would: load, change,
// save (a running server notices the change on disk).
func EditUsers(t testing.TB, file string, fn func(f *auth.File)) {
	t.Helper()
	f, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	fn(f)
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
}
