package builtin

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/dns/enrich"
	"github.com/plumb-dev/plumb/stage"
)

// RegisterEnrich adds enrich, whose databases are files of dbs's
// directory (the server's or worker's --geoip): a job names a database,
// it cannot point the stage at any other file.
func RegisterEnrich(reg *stage.Registry, dbs *enrich.Databases) {
	reg.Add(stage.Factory{
		Name: "enrich",
		Doc: "Adds who an address belongs to, to Arrow DNS records (src, dst) or transactions (client, server): X_country, " +
			"X_asn and X_as_org from the MaxMind-format databases ?db=NAME[,NAME] of the --geoip directory (the first that " +
			"knows a field gives it; a database renamed over its file is used from the next block on, no restart), X_resolver " +
			"from ?resolvers=shipped (public resolvers' service addresses, dated), none, or a FILE of \"PREFIX NAME\" lines " +
			"there added to them; and enriched_by, the database versions each row was enriched with.",
		New: func(args url.Values) (stage.Builtin, error) {
			return newEnrich(args, dbs)
		},
	})
}

func newEnrich(args url.Values, dbs *enrich.Databases) (*Enrich, error) {
	if err := stage.StrictArgs(args, "db", "resolvers"); err != nil {
		return nil, err
	}
	e := &Enrich{dbs: dbs, resolvers: args.Get("resolvers")}
	if v := args.Get("db"); v != "" {
		e.names = strings.Split(v, ",")
	}
	if e.resolvers == "" {
		e.resolvers = "shipped"
	}
	if len(e.names) == 0 && e.resolvers == "none" {
		return nil, fmt.Errorf("nothing to enrich with: name a database (?db=NAME) or keep the resolver list")
	}
	// Checked now, so a job naming a database the server lacks is
	// refused with the reason rather than failing every block.
	if _, _, err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

// Enrich adds address columns to Arrow tables.
type Enrich struct {
	dbs       *enrich.Databases
	names     []string
	resolvers string // shipped, none, or a file of the directory
}

// maxResolverFile bounds a resolver list read.
const maxResolverFile = 16 << 20

// open takes the current version of each database and the resolver list.
func (e *Enrich) open() ([]*enrich.DB, *enrich.Resolvers, error) {
	var dbs []*enrich.DB
	for _, name := range e.names {
		db, err := e.dbs.Get(name)
		if db == nil {
			return nil, nil, err
		}
		// A database changed but unreadable (still being copied in
		// place) leaves the version before in use: rows name it.
		dbs = append(dbs, db)
	}
	var res *enrich.Resolvers
	switch e.resolvers {
	case "none":
	case "shipped":
		res = enrich.ShippedResolvers()
	default:
		name := e.resolvers
		path, ok := e.dbs.Path(name)
		if !ok {
			return nil, nil, fmt.Errorf("resolvers=%q: want shipped, none, or a plain file name in the --geoip directory", name)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("resolvers=%s: no such file in the --geoip directory; an admin copies it there", name)
		}
		defer f.Close()
		own, err := enrich.ReadResolvers(io.LimitReader(f, maxResolverFile), name)
		if err != nil {
			return nil, nil, fmt.Errorf("resolvers=%s: %v", name, err)
		}
		if fi, err := f.Stat(); err == nil {
			own.Version = name + " " + fi.ModTime().UTC().Format("2006-01-02T15:04:05Z")
		}
		res = enrich.ShippedResolvers()
		res.Add(own)
	}
	return dbs, res, nil
}

// Run implements stage.Builtin.
func (e *Enrich) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	dbs, res, err := e.open()
	if err != nil {
		return err
	}
	return rewriteArrow(ctx, in, out, func(in *arrow.Schema) (*arrow.Schema, func(arrow.RecordBatch) (arrow.RecordBatch, error), error) {
		schema, cols, err := enrich.Schema(in)
		if err != nil {
			return nil, nil, err
		}
		en := enrich.NewEnricher(dbs, res)
		return schema, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
			out, err := en.Batch(schema, cols, rec)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", stage.ErrMalformed, err)
			}
			return out, nil
		}, nil
	}, ipc.WithZstdLevel(dnsrec.RecordsZstdLevel))
}
