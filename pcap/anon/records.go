package anon

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Records rewrites the addresses of a batch of Arrow DNS records or
// transactions (dns/dnsrec's and dns/dnspair's schemas): src, dst,
// client and server (with Clients, only the end not on port 53 or 853,
// and never server), the client subnet in ecs_address (to its source
// prefix, as in packets) and in edns_options, and with RData the A and
// AAAA answers. Other columns are kept as they are; a batch with none of
// these columns comes back as it was.
func (a *Anonymizer) Records(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	clients, rdata := a.cfg.Clients, a.cfg.RData
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
		var rewriteList func(*Anonymizer, *array.List) (arrow.Array, error)
		switch {
		case name == "edns_options":
			rewriteList = anonymizeOptions // the client subnet's address, as in packets
		case rdata && (name == "answers" || name == "authority" || name == "additional"):
			rewriteList = anonymizeRecords
		}
		if rewriteList != nil {
			if l, ok := cols[j].(*array.List); ok {
				nl, err := rewriteList(a, l)
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", name, err)
				}
				cols[j] = nl
				defer nl.Release()
			}
			continue
		}
		if name != "src" && name != "dst" && name != "client" && name != "server" && name != "ecs_address" {
			continue
		}
		if name == "server" && clients {
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
func anonymizeOptions(a *Anonymizer, l *array.List) (arrow.Array, error) {
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
func anonymizeRecords(a *Anonymizer, l *array.List) (arrow.Array, error) {
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

// ReadKey reads the key name of the keys directory dir (a server's
// --anon-keys): 32 bytes, raw or as 64 hex digits. Its bytes never
// appear in an error, nor does dir: errors reach whoever named the key.
func ReadKey(dir, name string) ([]byte, error) {
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
