package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
)

// OwnerKey holds the identity of the server whose metadata names a
// store's blobs. Two servers on one store would each see the other's
// blobs as orphans, and each one's fsck would delete them.
const OwnerKey = "plumb-owner"

// ErrOwned is returned by Claim for a store another server owns.
var ErrOwned = errors.New("store belongs to another server")

// Owner returns the identity a store was claimed by, or "" when it was
// never claimed.
func Owner(ctx context.Context, s Store) (string, error) {
	r, err := s.Open(ctx, OwnerKey)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the owner of store %s: %w", s, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 256))
	if err != nil {
		return "", fmt.Errorf("read the owner of store %s: %w", s, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Claim makes id the owner of a store that has none, and fails with
// ErrOwned when another id owns it. force takes a store over from its
// owner: for a server whose metadata was recreated, whose old blobs are
// orphans anyway.
func Claim(ctx context.Context, s Store, id string, force bool) error {
	owner, err := Owner(ctx, s)
	if err != nil {
		return err
	}
	switch {
	case owner == id:
		return nil
	case owner != "" && !force:
		return fmt.Errorf("%w: %s is used by the server with metadata id %s, and this one is %s; give each server its own store (--store, or its own --data), "+
			"or, if that server's metadata is gone for good, start this one with --claim-store to take the store over (its fsck will then delete the blobs the other server wrote)",
			ErrOwned, s, owner, id)
	}
	body := []byte(id + "\n")
	if err := s.Put(ctx, OwnerKey, bytes.NewReader(body), int64(len(body)), sha256.Sum256(body)); err != nil {
		return fmt.Errorf("claim store %s: %w", s, err)
	}
	return nil
}
