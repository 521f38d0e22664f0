// Package builtin holds Plumb's in-process stages: decode, encode and
// transcode between the codecs, and capture summaries. Register adds them
// to an engine registry.
package builtin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin/dns"
)

// Register adds every built-in to reg. xz says how to make xz streams
// (the system xz when found, else the Go encoder).
func Register(reg *stage.Registry, xz XZ) {
	registerPcapInfo(reg)
	registerCPUWork(reg)
	dns.Register(reg)
	registerParquet(reg)
	registerFlowHash(reg)
	registerRSSAC(reg)
	registerDNSMetrics(reg)
	registerDNSTop(reg)
	registerNewDomains(reg)
	reg.Add(stage.Factory{
		Name: "decode",
		Doc:  "Decompresses a block (snappy, xz, gzip or zstd, told from its first bytes); an uncompressed block passes through, unless its queue names a codec and it is no capture (a pcap.sz block neither snappy nor a pcap is set aside as malformed).",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args); err != nil {
				return nil, err
			}
			return &Transcode{To: codecs.None}, nil
		},
	})
	reg.Add(stage.Factory{
		Name: "encode",
		Doc:  "Compresses a block with ?codec=snappy|xz|gzip|zstd (default snappy).",
		New: func(args url.Values) (stage.Builtin, error) {
			to, err := codecArg(args, "codec")
			if err != nil {
				return nil, err
			}
			return &Transcode{To: to, Raw: true, XZ: xz}, nil
		},
	})
	reg.Add(stage.Factory{
		Name: "transcode",
		Doc:  "Decompresses a block and compresses it again with ?to=snappy|xz|gzip|zstd|none in one pass, with no block stored between.",
		New: func(args url.Values) (stage.Builtin, error) {
			to, err := codecArg(args, "to")
			if err != nil {
				return nil, err
			}
			return &Transcode{To: to, XZ: xz}, nil
		},
	})
}

func codecArg(args url.Values, key string) (codecs.Codec, error) {
	if err := stage.StrictArgs(args, key); err != nil {
		return "", err
	}
	name := args.Get(key)
	if name == "" {
		return codecs.Snappy, nil
	}
	return codecs.Parse(name)
}

// Transcode decodes a block (unless Raw) and encodes it with To.
type Transcode struct {
	To  codecs.Codec
	Raw bool // the input is not compressed: encode only
	XZ  XZ
}

// Run implements stage.Builtin. A block whose queue names a codec
// (pcap.sz) must be in it, or be an uncompressed capture: random bytes
// put as a .sz block used to pass as uncompressed, be archived, and fail
// every stage after.
func (t *Transcode) Run(ctx context.Context, sin stage.Input, in io.Reader, out io.Writer) error {
	src := in
	if !t.Raw {
		br := bufio.NewReaderSize(in, 1<<20)
		head, _ := br.Peek(codecs.SniffLen)
		got := codecs.Sniff(head)
		if want := codecs.FromExt(sin.Block.Queue); want != codecs.None && got != want && len(head) > 0 && !(got == codecs.None && pcap.IsCapture(head)) {
			return fmt.Errorf("%w: block %s is in queue %s, of %s blocks, but does not start as %s does (its first bytes: %q)",
				stage.ErrMalformed, sin.Block, sin.Block.Queue, want, want, head)
		}
		dec, err := got.NewReader(br)
		if err != nil {
			return malformed(err)
		}
		defer dec.Close()
		src = dec
	}
	if t.To == codecs.XZ {
		return malformed(t.XZ.Encode(ctx, src, out))
	}
	enc, err := t.To.NewWriter(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(enc, readerCtx{ctx, src}); err != nil {
		return malformed(err)
	}
	return enc.Close()
}

// Describe implements stage.Describer.
func (t *Transcode) Describe() string {
	if t.To == codecs.XZ {
		return "xz encoder: " + t.XZ.Name()
	}
	return ""
}

// malformed marks a codec's verdict on corrupt input, or on input over
// a decoder's limit, as malformed input: no retry reads it better.
func malformed(err error) error {
	var ce *codecs.CorruptError
	if errors.As(err, &ce) || errors.Is(err, codecs.ErrLimit) {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	return err
}

// readerCtx stops a long copy when the run is cancelled.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

var (
	_ stage.Builtin   = (*Transcode)(nil)
	_ stage.Describer = (*Transcode)(nil)
)
