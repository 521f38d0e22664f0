package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/anon"
	"github.com/plumb-dev/plumb/stage"
)

// RegisterAnonymize adds anonymize, whose keys are files in keys (the
// server's or worker's --anon-keys): a job names a key, it never holds
// one, and it cannot point the stage at any other file.
func RegisterAnonymize(reg *stage.Registry, keys string) {
	reg.Add(stage.Factory{
		Name: "anonymize",
		Doc: "Rewrites addresses so a capture or DNS records can be shared: ?key=NAME (a 32-byte key in the --anon-keys directory) " +
			"&method=cryptopan|truncate (prefix-preserving, or &v4=24&v6=48 bits kept) &what=all|clients (clients: not the end on port 53/853) " +
			"&rdata=true (A/AAAA answers too) &codec=same|none|snappy|xz|gzip|zstd. Captures keep every other byte, " +
			"packet count and time; checksums are updated. Arrow DNS records get src, dst, ecs_address and the client subnet option rewritten, transactions client and server.",
		New: func(args url.Values) (stage.Builtin, error) {
			return newAnonymize(args, keys)
		},
	})
}

func newAnonymize(args url.Values, keys string) (*Anonymize, error) {
	if err := stage.StrictArgs(args, "key", "method", "v4", "v6", "what", "rdata", "codec"); err != nil {
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
		key, err := anon.ReadKey(keys, args.Get("key"))
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

// Run implements stage.Builtin.
func (s *Anonymize) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
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
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
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
			return malformed(fmt.Errorf("%w: %v", stage.ErrMalformed, err))
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
			return a.Records(rec)
		}, nil
	}, ipc.WithZstd())
}

var _ stage.Builtin = (*Anonymize)(nil)
