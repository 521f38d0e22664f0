package flight

import (
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
)

// FuzzTicket: any bytes as a ticket give a ticket whose names are valid, or
// an error; never a panic.
func FuzzTicket(f *testing.F) {
	for _, s := range []string{
		`{"block":"20250505-151105-01789592.lax.pcap.sz"}`,
		`{"queue":"pcap.sz","group":"g","follow":true,"from":"earliest","visibility":1.5}`,
		`{"queue":"../x"}`, `{"block":"x","queue":"y"}`, `{`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tk, err := parseTicket(raw)
		if err != nil {
			return
		}
		if tk.Block != "" {
			if _, err := block.Parse(tk.Block); err != nil {
				t.Fatalf("accepted block ticket with bad name %q", tk.Block)
			}
			return
		}
		if block.ValidateQueue(tk.Queue) != nil || tk.Group != "" && block.ValidateGroup(tk.Group) != nil {
			t.Fatalf("accepted ticket with bad queue or group: %+v", tk)
		}
	})
}

// FuzzPutHeader: an accepted header always yields a blob key that is valid
// and stays inside the stream's queue and instance.
func FuzzPutHeader(f *testing.F) {
	f.Add([]byte(`{"name":"20250505-151105-00000001.lax.pcap.sz","size":10,"sha256":"` + strings.Repeat("ab", 32) + `"}`))
	f.Add([]byte(`{"name":"../../x","size":-1,"sha256":""}`))
	cmd := PutCommand{Queue: "pcap.sz", Instance: "lax"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, n, sum, err := parseHeader(cmd, raw, 1<<30)
		if err != nil {
			return
		}
		key := blob.BlockKey(n, sum)
		if err := blob.CheckKey(key); err != nil {
			t.Fatalf("header %q gave an invalid key: %v", raw, err)
		}
		if !strings.HasPrefix(key, "pcap.sz/lax/") || strings.Count(key, "/") != 2 || h.Size < 0 {
			t.Fatalf("header %q gave key %q outside its queue and instance", raw, key)
		}
	})
}
