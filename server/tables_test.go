package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pipeline"
)

// TestLakeKeyNeedsTheOwnersGrant: a lake table's plumb.privacy-key is
// used only when every owner of the stage writing its queue was granted
// the key under anon_keys, as builtin:anonymize's key is; a key granted
// to one owner of a shared stage and not the other is refused, and so is
// any key for a table no stage writes. Without users any key is used.
func TestLakeKeyNeedsTheOwnersGrant(t *testing.T) {
	file, _ := usersFile(t)
	testenv.EditUsers(t, file, func(f *auth.File) {
		f.AnonKeys = []auth.KeyGrant{{Keys: "capture-*", Groups: []string{"capture"}}, {Keys: "shared", Groups: []string{"capture", "analysts"}}}
	})
	authz, err := auth.NewAuthority(file, bytes.Repeat([]byte{1}, 32), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	node := func(queue string, users ...string) *pipeline.Node {
		n := &pipeline.Node{Name: "j/lake", Outputs: []string{queue}}
		for _, u := range users {
			n.Owners = append(n.Owners, pipeline.Owner{Job: "j-" + u, Stage: "lake", User: u})
		}
		return n
	}
	g := &pipeline.Graph{Stages: []*pipeline.Node{node("lax.dns.parquet", "lax-agent"), node("both.dns.parquet", "lax-agent", "ana")}}
	for _, c := range []struct {
		queue, key, refusal string
	}{
		{"lax.dns.parquet", "capture-lake", ""},
		{"lax.dns.parquet", "teama", "user lax-agent, who owns job j-lax-agent writing lax.dns.parquet, may not use anonymization key teama"},
		{"both.dns.parquet", "capture-lake", "user ana, who owns job j-ana writing both.dns.parquet, may not use anonymization key capture-lake"},
		{"both.dns.parquet", "shared", ""},
		{"gone.dns.parquet", "shared", "no stage writes gone.dns.parquet"},
	} {
		err := ownersMayUseKey(g, authz, c.queue, c.key)
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s with key %s: %v; want it used", c.queue, c.key, err)
		case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s with key %s: %v; want %q", c.queue, c.key, err, c.refusal)
		}
	}
	if err := ownersMayUseKey(g, nil, "gone.dns.parquet", "any"); err != nil {
		t.Errorf("without users: %v", err)
	}
}
