package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
)

// TestSitesHaveOwners: two users who may both write shared.* could write
// each other's sites; the second put a block as the first one's site c1,
// seq 2, and the first one's real seq 2 was then refused ("already
// stored"). A site's first writer now owns it: others' puts are refused
// with what to do, an admin may write any site and assign it, and a user
// removed and added again under the same name owns nothing.
func TestSitesHaveOwners(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	f, _ := auth.LoadOrNew(file)
	secrets := map[string]string{}
	add := func(user, group string) {
		s, err := f.AddUser(user, []string{group})
		if err != nil {
			t.Fatal(err)
		}
		secrets[user] = s
	}
	add("c1-agent", "capture")
	add("c2-agent", "capture")
	add("ops", "operators")
	f.Rules = []auth.Rule{
		{Queues: "shared.*", Groups: []string{"capture"}, Allow: []auth.Perm{auth.Write}},
		{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	addr := runServer(t, Config{Users: file})
	as := func(user string) *client.Client {
		return dialAs(t, addr, client.Security{User: user, Secret: secrets[user]})
	}
	c1, c2, ops := as("c1-agent"), as("c2-agent"), as("ops")
	ctx := context.Background()
	put := func(c *client.Client, site string, seq int, data string) error {
		_, err := c.Put(ctx, bytesSource(strings.Replace(name(seq), ".lax.pcap.sz", "."+site+".shared.pcap", 1), []byte(data)))
		return err
	}
	if err := put(c1, "c1", 1, "c1's first"); err != nil {
		t.Fatal(err)
	}
	err := put(c2, "c1", 2, "c2 posing as c1")
	wantCode(t, err, codes.PermissionDenied, "belongs to user c1-agent")
	wantCode(t, err, codes.PermissionDenied, "plumb site assign shared.pcap c1 c2-agent")
	if err := put(c1, "c1", 2, "c1's second"); err != nil {
		t.Fatalf("the owner's own next block after another's attempt: %v", err)
	}
	if err := put(c2, "c2", 1, "c2's own"); err != nil {
		t.Fatal(err)
	}
	owners, err := c2.SiteOwners(ctx, "")
	if err != nil || len(owners) != 2 || owners[0].Instance != "c1" || owners[0].User != "c1-agent" || owners[0].By != "first put" || owners[1].User != "c2-agent" {
		t.Fatalf("site owners: %+v %v", owners, err)
	}
	_, err = c2.AssignSite(ctx, "shared.pcap", "c1", "c2-agent")
	wantCode(t, err, codes.PermissionDenied, "admin")

	// An admin writes any site, and moves c1 to c2-agent.
	if err := put(ops, "c1", 3, "backfilled by ops"); err != nil {
		t.Fatalf("an admin's put: %v", err)
	}
	if o, err := ops.AssignSite(ctx, "shared.pcap", "c1", "c2-agent"); err != nil || o.User != "c2-agent" || o.By != "ops" {
		t.Fatalf("assign: %+v %v", o, err)
	}
	if err := put(c2, "c1", 4, "c2, now c1's owner"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, put(c1, "c1", 5, "c1, no longer"), codes.PermissionDenied, "belongs to user c2-agent")
	_, err = ops.AssignSite(ctx, "shared.pcap", "c1", "nobody")
	wantCode(t, err, codes.NotFound, "no user")

	// c2-agent removed and added again: the same name, someone else.
	f, _ = auth.LoadOrNew(file)
	delete(f.Users, "c2-agent")
	add("c2-agent", "capture")
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	again := as("c2-agent")
	wantCode(t, put(again, "c2", 2, "a new c2-agent"), codes.PermissionDenied, "belongs to an earlier user named c2-agent")
}

// TestKeysBoundToSites: an agent's API key may be bound to its site, so a
// key stolen from one sensor writes that sensor's blocks, not every site
// of the queues its user may write.
func TestKeysBoundToSites(t *testing.T) {
	file, _ := usersFile(t)
	f, _ := auth.LoadOrNew(file)
	bound, err := f.AddKey("lax-agent", time.Now(), "pcap.sz/lax")
	if err != nil {
		t.Fatal(err)
	}
	free, err := f.AddKey("lax-agent", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddKey("lax-agent", time.Now(), "pcap.sz"); err == nil || !strings.Contains(err.Error(), "want QUEUE/INSTANCE") {
		t.Fatalf("a site without an instance: %v", err)
	}
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	addr := runServer(t, Config{Users: file})
	withKey := func(key string) *client.Client {
		kf := filepath.Join(t.TempDir(), "key")
		os.WriteFile(kf, []byte(key), 0o600)
		return dialAs(t, addr, client.Security{TokenFile: kf})
	}
	ctx := context.Background()
	c := withKey(bound)
	if _, err := c.Put(ctx, bytesSource(name(1), []byte("lax's own"))); err != nil {
		t.Fatalf("the bound key puts its own site: %v", err)
	}
	_, err = c.Put(ctx, bytesSource(strings.Replace(name(1), ".lax.", ".nrt.", 1), []byte("another site")))
	wantCode(t, err, codes.PermissionDenied, "bound to the sites pcap.sz/lax, not pcap.sz/nrt")
	if _, err := withKey(free).Put(ctx, bytesSource(strings.Replace(name(1), ".lax.", ".nrt.", 1), []byte("an unbound key"))); err != nil {
		t.Fatalf("an unbound key of the same user: %v", err)
	}
}
