package benchkit

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CollectorVersion is the newest go-dnscollector the Go module proxy
// serves here (v0.39 and every v1 are refused).
const CollectorVersion = "v0.38.0"

// BuildCollector builds go-dnscollector from the module proxy into
// cache, once. Its filtering transformer imports inet.af/netaddr, which
// the proxy no longer serves; the successor package go4.org/netipx (the
// same authors, already in its go.mod) and net/netip have the same API
// under other names, so that one file is rewritten to them. Nothing on
// the dnstap path changes.
func BuildCollector(cache string) (string, error) {
	bin := filepath.Join(cache, "go-dnscollector-"+CollectorVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/dmachard/go-dnscollector@"+CollectorVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download go-dnscollector: %v", err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download go-dnscollector: %s", mod.Error)
	}
	src, err := os.MkdirTemp("", "go-dnscollector-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", err
	}
	patch := func(name string, edit func(string) string) error {
		p := filepath.Join(src, name)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		os.Chmod(p, 0o644)
		return os.WriteFile(p, []byte(edit(string(b))), 0o644)
	}
	dropNetaddr := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, "inet.af/netaddr") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	toNetipx := strings.NewReplacer(
		`"inet.af/netaddr"`, "\"go4.org/netipx\"\n\t\"net/netip\"",
		"netaddr.IPSetBuilder", "netipx.IPSetBuilder",
		"netaddr.IPSet", "netipx.IPSet",
		"netaddr.ParseIPPrefix", "netip.ParsePrefix",
		"netaddr.ParseIP", "netip.ParseAddr",
	).Replace
	for name, edit := range map[string]func(string) string{"go.mod": dropNetaddr, "go.sum": dropNetaddr, "transformers/filtering.go": toNetipx} {
		if err := patch(name, edit); err != nil {
			return "", err
		}
	}
	os.MkdirAll(cache, 0o755)
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building go-dnscollector %s: %v\n%s", CollectorVersion, err, out)
	}
	return bin, nil
}
