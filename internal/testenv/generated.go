package testenv

import (
	"os"
	"strings"
	"testing"
)

// CheckGenerated compares a page generated from the code with the one
// committed at path, or writes it when update is set; a difference fails
// the test naming the first line that differs and how to regenerate
// (regen, e.g. "go test ./server -run TestX -update").
func CheckGenerated(t testing.TB, path, got string, update bool, regen string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (make it with %s)", err, regen)
	}
	if string(want) == got {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			t.Fatalf("%s differs from the code at line %d:\n  page: %s\n  code: %s\nrun %s and commit it", path, i+1, wl[i], gl[i], regen)
		}
	}
	t.Fatalf("%s differs from the code in length (%d lines, code %d); run %s and commit it", path, len(wl), len(gl), regen)
}
