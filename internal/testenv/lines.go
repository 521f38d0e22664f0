package testenv

import "slices"

// Lacking returns the lines of a that b lacks, each as often as a has it
// more than b: a multiset difference of sorted lines, for a failure that
// names the rows one output has and another does not.
func Lacking(a, b []string) []string {
	var out []string
	for _, l := range a {
		if i, ok := slices.BinarySearch(b, l); ok {
			b = slices.Delete(slices.Clone(b), i, i+1)
			continue
		}
		out = append(out, l)
	}
	return out
}
