package stage

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// Factory makes a built-in from its arguments.
type Factory struct {
	Name string
	Doc  string
	New  func(args url.Values) (Builtin, error)
}

// Registry holds the built-in stages by name. It is a value built in main,
// not filled by init, so tests can make their own.
type Registry struct {
	byName map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]Factory{}} }

// Add registers a built-in; a second one of the same name panics, as that
// is a programming error.
func (r *Registry) Add(f Factory) {
	if _, ok := r.byName[f.Name]; ok {
		panic("stage: built-in " + f.Name + " registered twice")
	}
	r.byName[f.Name] = f
}

// New makes the named built-in with its arguments.
func (r *Registry) New(name string, args url.Values) (Builtin, error) {
	f, ok := r.byName[name]
	if !ok {
		return nil, fmt.Errorf("built-in %q is not known (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	b, err := f.New(args)
	if err != nil {
		return nil, fmt.Errorf("builtin:%s: %w", name, err)
	}
	return b, nil
}

// Names lists the registered built-ins, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Docs returns each built-in's documentation, sorted by name.
func (r *Registry) Docs() []Factory {
	out := make([]Factory, 0, len(r.byName))
	for _, n := range r.Names() {
		out = append(out, r.byName[n])
	}
	return out
}

// StrictArgs checks that args hold only the known keys, each once, so a
// misspelt argument is refused instead of ignored.
func StrictArgs(args url.Values, known ...string) error {
	for k, v := range args {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown argument %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(v) > 1 {
			return fmt.Errorf("argument %q given %d times", k, len(v))
		}
	}
	return nil
}
