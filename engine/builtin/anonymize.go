package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/anon"
)

// RegisterAnonymize adds anonymize, whose keys are files in keys (the
// server's or worker's --anon-keys): a job names a key, it never holds
// one, and it cannot point the stage at any other file.
func RegisterAnonymize(reg *engine.Registry, keys string) {
	reg.Add(engine.Factory{
		Name: "anonymize",
		Doc: "Rewrites addresses so a capture or DNS records can be shared: ?key=NAME (a 32-byte key in the --anon-keys directory) " +
			"&method=cryptopan|truncate (prefix-preserving, or &v4=24&v6=48 bits kept) &what=all|clients (clients: not the end on port 53/853) " +
			"&rdata=true (A/AAAA answers too) &codec=same|none|snappy|xz|gzip|zstd. Captures keep every other byte, " +
			"packet count and time; checksums are updated. Arrow DNS records get src, dst and ecs_address rewritten.",
		New: func(args url.Values) (engine.Builtin, error) {
			return newAnonymize(args, keys)
		},
	})
}

func newAnonymize(args url.Values, keys string) (*Anonymize, error) {
	if err := engine.StrictArgs(args, "key", "method", "v4", "v6", "what", "rdata", "codec"); err != nil {
		return nil, err
	}
	cfg := anon.Config{Method: args.Get("method")}
	if m := cfg.Method; m != "" && m != "cryptopan" && m != "truncate" {
		return nil, fmt.Errorf("method=%q: want cryptopan or truncate", m)
	}
	for _, b := range []struct {
		name string
		to   *int
	}{{"v4", &cfg.V4}, {"v6", &cfg.V6}} {
		if v := args.Get(b.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want a number of bits", b.name, v)
			}
			*b.to = n
		}
	}
	switch args.Get("what") {
	case "", "all":
	case "clients":
		cfg.Clients = true
	default:
		return nil, fmt.Errorf("what=%q: want all or clients", args.Get("what"))
	}
	switch args.Get("rdata") {
	case "", "false":
	case "true":
		cfg.RData = true
	default:
		return nil, fmt.Errorf("rdata=%q: want true or false", args.Get("rdata"))
	}
	a := &Anonymize{}
	if c := args.Get("codec"); c != "" && c != "same" {
		codec, err := codecs.Parse(c)
		if err != nil {
			return nil, err
		}
		a.codec = &codec
	}
	if cfg.Method == "" || cfg.Method == "cryptopan" {
		key, err := readKey(keys, args.Get("key"))
		if err != nil {
			return nil, err
		}
		cfg.Key = key
	} else if args.Get("key") != "" {
		return nil, fmt.Errorf("method=%s takes no key", cfg.Method)
	}
	if _, err := anon.New(cfg); err != nil { // checked now, so the job is refused
		return nil, err
	}
	a.cfg = cfg
	return a, nil
}

// readKey reads the key NAME of the keys directory: 32 bytes, raw or as
// 64 hex digits. Its bytes never appear in an error.
func readKey(dir, name string) ([]byte, error) {
	switch {
	case name == "":
		return nil, errors.New("key=NAME is required for cryptopan: the name of a key file in the --anon-keys directory (make one with `plumb anon-key NAME`)")
	case strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || len(name) > 64:
		return nil, fmt.Errorf("key=%q: a key is named by a plain file name in the --anon-keys directory", name)
	case dir == "":
		return nil, errors.New("no --anon-keys directory is set, so no key can be named")
	}
	// Errors name the key, never the server's paths: they reach whoever
	// submitted the job.
	path := filepath.Join(dir, name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("key %s: no such key on the server; an admin makes one with `plumb anon-key %s`", name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("key %s: cannot be read on the server (%v); an admin checks the --anon-keys directory", name, errors.Unwrap(err))
	}
	if fi.Size() > 256 {
		return nil, fmt.Errorf("key %s: %d bytes; a key is 32 bytes, or 64 hex digits", name, fi.Size())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key %s: cannot be read on the server (%v); an admin checks the --anon-keys directory", name, errors.Unwrap(err))
	}
	if len(raw) == 32 {
		return raw, nil
	}
	if key, err := hex.DecodeString(strings.TrimSpace(string(raw))); err == nil && len(key) == 32 {
		return key, nil
	}
	return nil, fmt.Errorf("key %s: not 32 bytes or 64 hex digits", name)
}

// Anonymize rewrites the addresses of a capture (any codec) or of Arrow
// DNS records.
type Anonymize struct {
	cfg   anon.Config
	codec *codecs.Codec // the output's; the input's when nil

	// idle holds anonymizers between runs, each with the cache of the
	// addresses it mapped: a site's next block has mostly the same ones,
	// and a cold cache costs 32 or 128 AES blocks an address.
	mu   sync.Mutex
	idle []*anon.Anonymizer
}

func (s *Anonymize) get() (*anon.Anonymizer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idle); n > 0 {
		a := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return a, nil
	}
	return anon.New(s.cfg)
}

func (s *Anonymize) put(a *anon.Anonymizer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) < 8 {
		s.idle = append(s.idle, a)
	}
}

// arrowMagic starts an Arrow IPC file.
var arrowMagic = []byte("ARROW1")

// Run implements engine.Builtin.
func (s *Anonymize) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	a, err := s.get()
	if err != nil {
		return err
	}
	defer s.put(a)
	br := bufio.NewReaderSize(in, 1<<20)
	head, _ := br.Peek(codecs.SniffLen)
	if bytes.HasPrefix(head, arrowMagic) {
		return s.records(ctx, a, br, out)
	}
	codec := codecs.Sniff(head)
	if s.codec != nil {
		codec = *s.codec
	}
	r, closer, err := pcap.NewReader(br)
	if err != nil {
		return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
	}
	defer closer.Close()
	enc, err := codec.NewWriter(out)
	if err != nil {
		return err
	}
	w, err := pcap.NewWriter(enc, r.LinkType, r.Snaplen, r.Nanos)
	if err != nil {
		return err
	}
	for n := 0; ; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		// Runs of records as they are in the file are rewritten in place
		// and written whole: no work per record but the packet's own.
		if run, k := r.NextRun(pcap.RunLimit{Bytes: 1 << 20}); k > 0 {
			for off := 0; off < len(run); {
				incl := int(binary.LittleEndian.Uint32(run[off+8:]))
				a.Packet(r.LinkType, run[off+pcap.RecordHeaderSize:off+pcap.RecordHeaderSize+incl])
				off += pcap.RecordHeaderSize + incl
			}
			if err := w.WriteRun(run); err != nil {
				return err
			}
			continue
		}
		data, ci, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return malformed(fmt.Errorf("%w: %v", engine.ErrMalformed, err))
		}
		a.Packet(r.LinkType, data)
		if err := w.WritePacket(ci, data); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return enc.Close()
}

// records rewrites the address columns of Arrow DNS records: src and dst
// (only the client's with what=clients: the one whose port is not 53 or
// 853) and ecs_address when the file has it.
func (s *Anonymize) records(ctx context.Context, a *anon.Anonymizer, in io.Reader, out io.Writer) error {
	return rewriteArrow(ctx, in, out, func(schema *arrow.Schema) (*arrow.Schema, func(arrow.RecordBatch) (arrow.RecordBatch, error), error) {
		return schema, func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
			return anonymizeBatch(a, s.cfg.Clients, s.cfg.RData, rec)
		}, nil
	}, ipc.WithZstd())
}

func anonymizeBatch(a *anon.Anonymizer, clients, rdata bool, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	schema := rec.Schema()
	ports := func(name string) *array.Uint16 {
		if idx := schema.FieldIndices(name); len(idx) > 0 {
			c, _ := rec.Column(idx[0]).(*array.Uint16)
			return c
		}
		return nil
	}
	sport, dport := ports("sport"), ports("dport")
	var ecsPrefix *array.Uint8
	if idx := schema.FieldIndices("ecs_source_prefix"); len(idx) > 0 {
		ecsPrefix, _ = rec.Column(idx[0]).(*array.Uint8)
	}
	cols := make([]arrow.Array, rec.NumCols())
	for j := range cols {
		cols[j] = rec.Column(j)
		name := schema.Field(j).Name
		if name == "edns_options" {
			// The client subnet's address, as in packets.
			if l, ok := cols[j].(*array.List); ok {
				nl, err := anonymizeOptions(a, l)
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", name, err)
				}
				cols[j] = nl
				defer nl.Release()
			}
			continue
		}
		if rdata && (name == "answers" || name == "authority" || name == "additional") {
			if l, ok := cols[j].(*array.List); ok {
				nl, err := anonymizeRecords(a, l)
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", name, err)
				}
				cols[j] = nl
				defer nl.Release()
			}
			continue
		}
		if name != "src" && name != "dst" && name != "ecs_address" {
			continue
		}
		str, ok := cols[j].(*array.String)
		if !ok {
			return nil, fmt.Errorf("column %s is %s, not text", name, cols[j].DataType())
		}
		b := array.NewStringBuilder(memory.DefaultAllocator)
		for i := 0; i < str.Len(); i++ {
			if str.IsNull(i) {
				b.AppendNull()
				continue
			}
			v := str.Value(i)
			keep := false
			if clients && sport != nil && dport != nil && name != "ecs_address" {
				// The server's end stays: the source of an answer from
				// port 53, the destination of a query to it.
				sp, dp := sport.Value(i), dport.Value(i)
				keep = name == "src" && (sp == 53 || sp == 853) || name == "dst" && (dp == 53 || dp == 853) && !(sp == 53 || sp == 853)
			}
			if x, err := netip.ParseAddr(v); err == nil && !keep {
				y := a.Map(x)
				if name == "ecs_address" && ecsPrefix != nil && !ecsPrefix.IsNull(i) {
					// As in packets: the subnet's bits only, the rest zero.
					if p, err := y.Prefix(int(ecsPrefix.Value(i))); err == nil {
						y = p.Addr()
					}
				}
				v = y.String()
			}
			b.Append(v)
		}
		cols[j] = b.NewArray()
		b.Release()
		defer cols[j].Release()
	}
	return array.NewRecordBatch(schema, cols, rec.NumRows()), nil
}

// anonymizeOptions rewrites the address of the client subnet options in a
// list<struct{code, data}> column (edns_options).
func anonymizeOptions(a *anon.Anonymizer, l *array.List) (arrow.Array, error) {
	st, ok := l.ListValues().(*array.Struct)
	if !ok || st.NumField() != 2 {
		return nil, fmt.Errorf("not a list of options")
	}
	code, ok1 := st.Field(0).(*array.Uint16)
	data, ok2 := st.Field(1).(*array.Binary)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("not a list of options")
	}
	b := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer b.Release()
	for i := 0; i < data.Len(); i++ {
		d := bytes.Clone(data.Value(i))
		if code.Value(i) == 8 {
			a.ECSOption(d)
		}
		b.Append(d)
	}
	return replaceField(l, st, 1, b.NewArray())
}

// replaceField is list l with field k of its struct values replaced.
func replaceField(l *array.List, st *array.Struct, k int, col arrow.Array) (arrow.Array, error) {
	defer col.Release()
	fields := make([]arrow.Array, st.NumField())
	for i := range fields {
		fields[i] = st.Field(i)
	}
	fields[k] = col
	nst, err := array.NewStructArrayWithFields(fields, st.DataType().(*arrow.StructType).Fields())
	if err != nil {
		return nil, err
	}
	defer nst.Release()
	data := array.NewData(l.DataType(), l.Len(), l.Data().Buffers(), []arrow.ArrayData{nst.Data()}, l.NullN(), l.Data().Offset())
	defer data.Release()
	return array.MakeFromData(data), nil
}

// anonymizeRecords rewrites the rdata of the A and AAAA records in a
// list<struct{name, type, class, ttl, rdata}> column (the DNS records'
// sections), as rdata=true does in packets.
func anonymizeRecords(a *anon.Anonymizer, l *array.List) (arrow.Array, error) {
	st, ok := l.ListValues().(*array.Struct)
	if !ok || st.NumField() != 5 {
		return nil, fmt.Errorf("not a list of records")
	}
	typ, ok1 := st.Field(1).(*array.Uint16)
	rd, ok2 := st.Field(4).(*array.String)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("not a list of records")
	}
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := 0; i < rd.Len(); i++ {
		v := rd.Value(i)
		if t := typ.Value(i); (t == 1 || t == 28) && !rd.IsNull(i) {
			if x, err := netip.ParseAddr(v); err == nil {
				v = a.Map(x).String()
			}
		}
		b.Append(v)
	}
	return replaceField(l, st, 4, b.NewArray())
}

var _ engine.Builtin = (*Anonymize)(nil)
