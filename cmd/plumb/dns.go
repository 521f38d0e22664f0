package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/dns/dnspair"
	"github.com/plumb-dev/plumb/dns/dnsrec"
	"github.com/plumb-dev/plumb/dns/dnstap"
	"github.com/plumb-dev/plumb/internal/arrowjson"
	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin/dns"
)

func dnsCommand() command {
	return command{
		name:  "dns",
		usage: "[-o OUT.arrow|OUT.parquet|OUT.jsonl|-] [--pairs] [--ports 53,853] [--filter EXPR] CAPTURE|-",
		short: "extract the DNS messages (or, with --pairs, transactions) of a capture (- for stdin) into Arrow, Parquet or JSON lines, as builtin:dns (builtin:dnspairs) does",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			out := fs.String("o", "", "`FILE` to write, Arrow IPC unless --format or its name (.parquet, .jsonl) says otherwise; - writes JSON lines to stdout (default: count only)")
			var format string
			fs.Func("format", "`FORMAT` of -o: arrow, parquet (ZSTD, as builtin:parquet; up to 1 GiB of records) or jsonl (a JSON object per row)", func(v string) error {
				format = v
				_, err := outputFormat("", v)
				return err
			})
			filterExpr := fs.String("filter", "", "read only the frames this capture filter `EXPR` (tcpdump's syntax, as plumb agent --filter) matches, e.g. \"host 192.0.2.53\"")
			var ports []uint16
			fs.Func("ports", "`PORTS` DNS is read on, separated by commas (default 53), as builtin:dns?ports=", func(v string) (err error) {
				ports, err = dns.ParsePorts(v)
				return err
			})
			instance := fs.String("instance", "local", "instance (site) written in each row")
			seq := fs.Uint64("seq", 0, "sequence number written in each row")
			pairs := fs.Bool("pairs", false, "write one row per transaction (query and response paired), as builtin:dnspairs")
			namesFlag := fs.String("names", "all", "the columns derived from qname made: all, none, or qname_raw,labels,tld,registered_domain; the others are null, as builtin:dns?names=")
			level := dnsrec.RecordsZstdLevel
			fs.Func("zstd", "the records' compression `LEVEL`: fast (the default), balanced, or small (files 8-31% smaller for 18-93% more CPU), as builtin:dns?zstd=", func(v string) (err error) {
				level, err = dnsrec.ParseZstd(v)
				return err
			})
			sectionsFlag := fs.String("sections", "all", "record `SECTIONS` read: all, question (none), or answer,authority,additional; the others are null, as builtin:dns?sections=")
			files, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(files) != 1 {
				return errUsage
			}
			sections, err := dnsmsg.ParseSections(*sectionsFlag)
			if err != nil {
				return err
			}
			names, err := dnsrec.ParseNames(*namesFlag)
			if err != nil {
				return err
			}
			form, err := outputFormat(*out, format)
			if err != nil {
				return err
			}
			var in io.ReadCloser = os.Stdin
			if files[0] != "-" {
				f, err := os.Open(files[0])
				if err != nil {
					return err
				}
				in = f
			}
			// A Frame Streams file of dnstap reads as its capture.
			in = dnstap.OpenCapture(in)
			defer in.Close()
			// Parquet and JSON lines are made from the Arrow file once it
			// is whole.
			var w io.Writer = io.Discard
			var of *os.File
			if *out != "" {
				if form == "arrow" && *out != "-" {
					of, err = os.Create(*out)
				} else {
					of, err = os.CreateTemp("", "plumb-dns-*.arrow")
					if err == nil {
						defer os.Remove(of.Name())
					}
				}
				if err != nil {
					return err
				}
				defer of.Close()
				w = of
			}
			// The very built-in a pipeline runs, on one block of its own.
			var b stage.Edged = &dns.Messages{Ports: ports, Skip: dnsmsg.AllSections &^ sections, SkipNames: dnsrec.AllNames &^ names, Zstd: level, Filter: *filterExpr}
			if *pairs {
				b = &dns.Pairs{Ports: ports, Window: dnspair.DefaultWindow, MaxPending: dnspair.DefaultMaxPending, Zstd: level, Filter: *filterExpr}
			}
			bw := bufio.NewWriterSize(w, 1<<20)
			run := stage.Input{Block: block.Name{Instance: *instance, Seq: *seq}}
			start := time.Now()
			// A capture that fails leaves no half-written -o behind.
			failed := func(err error) error {
				if of != nil && form == "arrow" && *out != "-" {
					of.Close()
					os.Remove(*out)
				}
				return fmt.Errorf("%s: %w", files[0], err)
			}
			part, err := stage.Start(ctx, b, run, in, bw)
			if err != nil {
				return failed(err)
			}
			if err := stage.Finish(ctx, part, run); err != nil {
				return failed(err)
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			read := part.(interface{ Read() dns.Read }).Read()
			if read.Truncated != nil {
				fmt.Fprintf(os.Stderr, "warning: %s: %v; the last record was dropped\n", files[0], read.Truncated)
			}
			if of != nil {
				if err := of.Close(); err != nil {
					return err
				}
				if form != "arrow" || *out == "-" {
					if err := convertRecords(ctx, of.Name(), *out, form); err != nil {
						return err
					}
				}
			}
			st := read.Messages
			secs := time.Since(start).Seconds()
			fmt.Fprintf(os.Stderr, "%d packets, %d DNS messages (%d UDP, %d TCP, %d malformed) in %.2fs: %.0f packets/s\n",
				st.Packets, st.Messages, st.UDP, st.TCP, st.Malformed, secs, float64(st.Packets)/secs)
			if ps := read.Pairs; ps != nil {
				fmt.Fprintf(os.Stderr, "%d transactions: %s\n", ps.Answered+ps.Unanswered+ps.Orphans+ps.Evicted, ps)
			}
			return nil
		},
	}
}

// outputFormat is the format plumb dns writes -o in: --format, else the
// name's extension (.parquet, .jsonl/.ndjson/.json), else Arrow; "-"
// (stdout) is JSON lines unless --format says otherwise.
func outputFormat(out, format string) (form string, err error) {
	defer func() {
		if form == "parquet" && writeParquet == nil {
			form, err = "", errNoParquet
		}
	}()
	switch format {
	case "arrow", "parquet", "jsonl":
		return format, nil
	case "":
	default:
		return "", fmt.Errorf("want arrow, parquet or jsonl")
	}
	switch ext := strings.ToLower(filepath.Ext(out)); {
	case out == "-":
		return "jsonl", nil
	case ext == ".parquet":
		return "parquet", nil
	case ext == ".jsonl" || ext == ".ndjson" || ext == ".json":
		return "jsonl", nil
	}
	return "arrow", nil
}

// convertRecords writes the Arrow IPC file at path to out ("-":
// stdout) as Parquet (as builtin:parquet writes it) or JSON lines, or
// copies it for Arrow to stdout.
func convertRecords(ctx context.Context, path, out, form string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	var w io.Writer = os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	switch form {
	case "parquet":
		err = writeParquet(ctx, src, bw)
	case "jsonl":
		err = recordsToJSON(src, bw)
	default:
		_, err = io.Copy(bw, src)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && out != "-" {
		err = w.(*os.File).Close()
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// recordsToJSON writes each row of an Arrow IPC file as a JSON object on
// a line of its own.
func recordsToJSON(src *os.File, w io.Writer) error {
	r, err := ipc.NewFileReader(src)
	if err != nil {
		return err
	}
	defer r.Close()
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		if err != nil {
			return err
		}
		rows, line := arrowjson.New(rec), []byte(nil)
		for j := range int(rec.NumRows()) {
			line = append(rows.Append(line[:0], j), '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
	}
	return nil
}
