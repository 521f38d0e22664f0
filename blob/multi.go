package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Locations remembers which member store holds each blob. It lives with
// the metadata (package state); a blob with no location is in the
// primary store, as every blob was before there were several.
type Locations interface {
	Location(key string) (store string, ok bool, err error)
	SetLocation(key, store string) error
	ForgetLocation(key string) error
}

// Multi is a Store made of named member stores. New blobs go to the
// member with the most free space (members that cannot tell count as
// roomy, and ties take turns); each blob's member is recorded in
// Locations. A member can be drained: it takes no new blobs and its blobs
// move to the others while reads go on.
type Multi struct {
	locs    Locations
	primary string

	mu      sync.Mutex
	members map[string]*member
	turn    int

	rmu     sync.Mutex
	readers map[string]int // member\x00key → open readers
	closed  chan struct{}  // signalled when a reader closes
}

type member struct {
	name, url string
	store     Store
	draining  bool
}

var (
	_ Store  = (*Multi)(nil)
	_ Linker = (*Multi)(nil)
)

// NewMulti returns a Multi whose primary member is s.
func NewMulti(locs Locations, primary, url string, s Store) *Multi {
	return &Multi{locs: locs, primary: primary, members: map[string]*member{primary: {name: primary, url: url, store: s}},
		readers: map[string]int{}, closed: make(chan struct{}, 1)}
}

// Add adds a member store.
func (m *Multi) Add(name, url string, s Store) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.members[name]; dup {
		return fmt.Errorf("store %s exists already; `plumb store list` shows the stores", name)
	}
	m.members[name] = &member{name: name, url: url, store: s}
	return nil
}

// Remove closes and forgets an empty member (drain it first).
func (m *Multi) Remove(ctx context.Context, name string) error {
	m.mu.Lock()
	mb := m.members[name]
	m.mu.Unlock()
	switch {
	case mb == nil:
		return fmt.Errorf("%w %s; `plumb store list` shows the stores", ErrNoStore, name)
	case name == m.primary:
		return fmt.Errorf("store %s is the primary store (--store); it cannot be removed", name)
	}
	n := 0
	mb.store.List(ctx, func(Info) error { n++; return nil })
	if n > 0 {
		return fmt.Errorf("store %s still holds %d blobs; `plumb store drain %s` first", name, n, name)
	}
	m.mu.Lock()
	delete(m.members, name)
	m.mu.Unlock()
	return mb.store.Close()
}

// Primary is the primary member's store (--store): where things that
// are not blobs, such as the Iceberg tables' files, live.
func (m *Multi) Primary() Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.members[m.primary].store
}

// Stores are the members' stores, by name.
func (m *Multi) Stores() []Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Store
	for _, name := range slices.Sorted(maps.Keys(m.members)) {
		out = append(out, m.members[name].store)
	}
	return out
}

// ErrNoStore is wrapped by the errors about a store name no member has.
var ErrNoStore = errors.New("no store")

// MemberInfo describes a member for `plumb store list`.
type MemberInfo struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Primary  bool   `json:"primary,omitempty"`
	Draining bool   `json:"draining,omitempty"`
	Free     int64  `json:"free"` // -1 when the store cannot tell
	Total    int64  `json:"total"`
}

// Members lists the members by name.
func (m *Multi) Members() []MemberInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []MemberInfo
	for _, mb := range m.members {
		mi := MemberInfo{Name: mb.name, URL: mb.url, Primary: mb.name == m.primary, Draining: mb.draining, Free: -1, Total: -1}
		if sp, ok := mb.store.(Spacer); ok {
			if free, total, err := sp.Space(); err == nil {
				mi.Free, mi.Total = free, total
			}
		}
		out = append(out, mi)
	}
	slices.SortFunc(out, func(a, b MemberInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// roomy stands for the free space of a store that cannot tell (an object
// store grows on demand).
const roomy = 1 << 50

// place picks the member for a new blob of n bytes.
func (m *Multi) place(n int64, except string) (*member, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best []*member
	var bestFree int64 = -1
	names := make([]string, 0, len(m.members))
	for name := range m.members {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		mb := m.members[name]
		if mb.draining || name == except {
			continue
		}
		free := int64(roomy)
		if sp, ok := mb.store.(Spacer); ok {
			if f, _, err := sp.Space(); err == nil {
				free = f
			}
		}
		switch {
		case free > bestFree:
			best, bestFree = []*member{mb}, free
		case free == bestFree:
			best = append(best, mb)
		}
	}
	if len(best) == 0 || bestFree < n {
		return nil, fmt.Errorf("no store has room for %d bytes (every store is draining or full); add one with `plumb store add`", n)
	}
	m.turn++
	return best[m.turn%len(best)], nil
}

// where returns the member holding key.
func (m *Multi) where(key string) (*member, error) {
	name, ok, err := m.locs.Location(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		name = m.primary
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	if mb == nil {
		return nil, fmt.Errorf("blob %s is in store %s, which is not open: %w", key, name, ErrNotFound)
	}
	return mb, nil
}

// Where names the member holding key.
func (m *Multi) Where(key string) (string, error) {
	mb, err := m.where(key)
	if err != nil {
		return "", err
	}
	return mb.name, nil
}

// Location implements Locator for the member holding key, when that
// member can say.
func (m *Multi) Location(key string) (string, error) {
	mb, err := m.where(key)
	if err != nil {
		return "", err
	}
	l, ok := mb.store.(Locator)
	if !ok {
		return "", fmt.Errorf("blob %s is in store %s (%s), whose files outside readers cannot open in place", key, mb.name, mb.url)
	}
	return l.Location(key)
}

// Put implements Store.
func (m *Multi) Put(ctx context.Context, key string, r io.Reader, size int64, sum Sum) error {
	recorded, located, err := m.locs.Location(key)
	if err != nil {
		return err
	}
	if located {
		if mb, err := m.where(key); err == nil {
			if _, err := mb.store.Stat(ctx, key); err == nil {
				// Already stored (a re-run's output): Put is idempotent there.
				return mb.store.Put(ctx, key, r, size, sum)
			}
		}
	}
	mb, err := m.place(size, "")
	if err != nil {
		return err
	}
	if err := mb.store.Put(ctx, key, r, size, sum); err != nil {
		return err
	}
	switch {
	case mb.name != m.primary && mb.name != recorded:
		return m.locs.SetLocation(key, mb.name)
	case mb.name == m.primary && located:
		return m.locs.ForgetLocation(key)
	}
	return nil // the primary holds what has no location: one write less per blob
}

// Open implements Store. A read racing a move to another member finds
// the blob at its new place; the old copy is deleted only once the
// readers that opened it are done.
func (m *Multi) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	var last error
	for range 3 {
		mb, err := m.where(key)
		if err != nil {
			return nil, err
		}
		id := mb.name + "\x00" + key
		m.rmu.Lock()
		m.readers[id]++
		m.rmu.Unlock()
		r, err := mb.store.Open(ctx, key)
		if err == nil {
			return &trackedReader{ReadCloser: r, m: m, id: id}, nil
		}
		m.release(id)
		last = err
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if now, _ := m.where(key); now == mb {
			return nil, err // not moved: really missing
		}
	}
	return nil, last
}

type trackedReader struct {
	io.ReadCloser
	m    *Multi
	id   string
	once sync.Once
}

func (t *trackedReader) Close() error {
	err := t.ReadCloser.Close()
	t.once.Do(func() { t.m.release(t.id) })
	return err
}

// Seek lets readers of a directory member seek, as *os.File does.
func (t *trackedReader) Seek(off int64, whence int) (int64, error) {
	if s, ok := t.ReadCloser.(io.Seeker); ok {
		return s.Seek(off, whence)
	}
	return 0, errors.New("this store's readers cannot seek")
}

func (m *Multi) release(id string) {
	m.rmu.Lock()
	if m.readers[id]--; m.readers[id] <= 0 {
		delete(m.readers, id)
	}
	m.rmu.Unlock()
	select {
	case m.closed <- struct{}{}:
	default:
	}
}

// waitReaders waits until no reader holds key on member, or ctx ends.
func (m *Multi) waitReaders(ctx context.Context, name, key string) {
	id := name + "\x00" + key
	for {
		m.rmu.Lock()
		n := m.readers[id]
		m.rmu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.closed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stat implements Store.
func (m *Multi) Stat(ctx context.Context, key string) (Info, error) {
	mb, err := m.where(key)
	if err != nil {
		return Info{}, err
	}
	info, err := mb.store.Stat(ctx, key)
	info.Store = mb.name
	return info, err
}

// Delete implements Store.
func (m *Multi) Delete(ctx context.Context, key string) error {
	mb, err := m.where(key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	if err := mb.store.Delete(ctx, key); err != nil {
		return err
	}
	if mb.name == m.primary {
		return nil // unless a record says otherwise, nothing was recorded
	}
	return m.locs.ForgetLocation(key)
}

// DeleteFrom deletes a copy of key from one member, such as a leftover
// of an interrupted move that fsck found; the location is not touched.
func (m *Multi) DeleteFrom(ctx context.Context, store, key string) error {
	m.mu.Lock()
	mb := m.members[store]
	m.mu.Unlock()
	if mb == nil {
		return fmt.Errorf("%w %s", ErrNoStore, store)
	}
	return mb.store.Delete(ctx, key)
}

// List implements Store: every member's blobs, each with its member's
// name in Info.Store.
func (m *Multi) List(ctx context.Context, fn func(Info) error) error {
	m.mu.Lock()
	members := make([]*member, 0, len(m.members))
	for _, mb := range m.members {
		members = append(members, mb)
	}
	m.mu.Unlock()
	for _, mb := range members {
		if err := mb.store.List(ctx, func(i Info) error { i.Store = mb.name; return fn(i) }); err != nil {
			return err
		}
	}
	return nil
}

// Link implements Linker when the blob's member is a local directory.
func (m *Multi) Link(key, dst string) error {
	mb, err := m.where(key)
	if err != nil {
		return err
	}
	l, ok := mb.store.(Linker)
	if !ok {
		return fmt.Errorf("store %s cannot hard-link", mb.name)
	}
	return l.Link(key, dst)
}

// Space sums the free space of the members taking new blobs, when all of
// them can tell.
func (m *Multi) Space() (free, total int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range m.members {
		if mb.draining {
			continue
		}
		sp, ok := mb.store.(Spacer)
		if !ok {
			return 0, 0, errors.New("a store cannot tell its free space")
		}
		f, t, err := sp.Space()
		if err != nil {
			return 0, 0, err
		}
		free += f
		total += t
	}
	return free, total, nil
}

// String names the primary store and the number of members.
func (m *Multi) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.members[m.primary]
	if len(m.members) == 1 {
		return p.store.String()
	}
	return fmt.Sprintf("%s and %d more stores", p.store.String(), len(m.members)-1)
}

// Close closes every member.
func (m *Multi) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, mb := range m.members {
		errs = append(errs, mb.store.Close())
	}
	return errors.Join(errs...)
}

// DrainReport says what a drain moved and what it left.
type DrainReport struct {
	Store   string   `json:"store"`
	Moved   int      `json:"moved"`
	Bytes   int64    `json:"bytes"`
	Left    []string `json:"left"` // keys still on the store when the deadline passed
	Seconds float64  `json:"seconds"`
}

// Drain moves every blob of a member to the others, `workers` at a time,
// while reads go on: the member takes no new blobs from the start; each
// blob is copied, verified by the target's Put, relocated, and deleted
// from the member once its open readers are done. When ctx ends (the
// deadline), the blobs not yet moved are listed in Left and stay
// readable where they are.
func (m *Multi) Drain(ctx context.Context, name string, workers int) (rep DrainReport, err error) {
	rep.Store = name
	start := time.Now()
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	m.mu.Lock()
	src := m.members[name]
	if src != nil {
		src.draining = true
	}
	m.mu.Unlock()
	if src == nil {
		return rep, fmt.Errorf("%w %s; `plumb store list` shows the stores", ErrNoStore, name)
	}
	var keys []Info
	if err := src.store.List(context.WithoutCancel(ctx), func(i Info) error { keys = append(keys, i); return nil }); err != nil {
		return rep, err
	}
	var (
		mu   sync.Mutex
		next int
		errs []error
		wg   sync.WaitGroup
	)
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= len(keys) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				i := keys[next]
				next++
				mu.Unlock()
				moved, err := m.move(ctx, src, i)
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil:
					errs = append(errs, fmt.Errorf("move %s: %w", i.Key, err))
				case moved:
					rep.Moved++
					rep.Bytes += i.Size
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// What is still there when we stop is left.
	src.store.List(context.WithoutCancel(ctx), func(i Info) error {
		if mb, err := m.where(i.Key); err == nil && mb == src {
			rep.Left = append(rep.Left, i.Key)
		}
		return nil
	})
	slices.Sort(rep.Left)
	return rep, errors.Join(errs...)
}

// move copies one blob off src; false when it was not src's to move.
func (m *Multi) move(ctx context.Context, src *member, i Info) (bool, error) {
	if mb, err := m.where(i.Key); err != nil || mb != src {
		return false, err // a stale copy: fsck collects it
	}
	sum, err := sumOfKey(i.Key)
	if err != nil {
		return false, err
	}
	dst, err := m.place(i.Size, src.name)
	if err != nil {
		return false, err
	}
	r, err := src.store.Open(ctx, i.Key)
	if err != nil {
		return false, err
	}
	err = dst.store.Put(ctx, i.Key, r, i.Size, sum)
	r.Close()
	if err != nil {
		return false, err
	}
	if err := m.locs.SetLocation(i.Key, dst.name); err != nil {
		return false, err
	}
	// Readers that opened the old copy finish on it; then it goes. The
	// move is done even if the deadline comes first: the copy stays until
	// fsck finds it orphaned.
	m.waitReaders(ctx, src.name, i.Key)
	if ctx.Err() == nil {
		if err := src.store.Delete(context.WithoutCancel(ctx), i.Key); err != nil {
			return true, err
		}
	}
	return true, nil
}

// sumOfKey reads the SHA-256 a block key holds (BlockKey).
func sumOfKey(key string) (Sum, error) {
	_, sum, err := ParseBlockKey(key)
	return sum, err
}

// SetDraining marks a member as taking no new blobs (as a drain does), or
// taking them again.
func (m *Multi) SetDraining(name string, draining bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	if mb == nil {
		return fmt.Errorf("%w %s; `plumb store list` shows the stores", ErrNoStore, name)
	}
	mb.draining = draining
	return nil
}
