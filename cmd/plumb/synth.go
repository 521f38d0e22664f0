package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/codecs"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

func synthCommand() command {
	return command{
		name:  "synth",
		usage: "--out FILE (--duration D | --size N)",
		short: "generate a realistic DNS traffic capture, deterministic per seed (compressed by the file's extension)",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			var cfg synth.Config
			out := fs.String("out", "", "output capture `FILE` (.pcap, or .pcap.sz/.gz/.xz/.zst to compress)")
			start := fs.String("start", "2025-05-05T00:00:00Z", "time of the first packet (RFC 3339)")
			size := fs.String("size", "0", "stop at this many bytes of pcap, e.g. 256MiB")
			fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed: the same seed gives the same capture")
			fs.DurationVar(&cfg.Duration, "duration", 0, "stop at this much packet time, e.g. 10m")
			fs.Float64Var(&cfg.Rate, "rate", 2000, "queries per second")
			fs.IntVar(&cfg.Sources, "sources", 5000, "client addresses")
			fs.IntVar(&cfg.Names, "names", 20000, "distinct query names")
			fs.Float64Var(&cfg.TCP, "tcp", 0.05, "fraction of exchanges over TCP (each TCP connection carries 1 to 4 queries)")
			fs.Float64Var(&cfg.IPv6, "ipv6", 0.3, "fraction of queries over IPv6")
			fs.Float64Var(&cfg.EDNS, "edns", 0.7, "fraction of queries with EDNS0")
			mix := fs.String("mix", "normal", "traffic mix: normal; signed (an authoritative server of signed zones: answers with RRSIGs, DNSSEC asked for, keys, large TXT); or attack (random-subdomain flood, TCP floods, fragmented answers, reordered TCP, malformed queries); the fractions below override it")
			fractions := map[string]*float64{"random-subdomain": &cfg.RandomSubdomain, "tcp-flood": &cfg.TCPFlood,
				"fragments": &cfg.Fragments, "reorder": &cfg.Reorder, "malformed": &cfg.Malformed}
			fs.Float64Var(&cfg.RandomSubdomain, "random-subdomain", 0, "fraction of exchanges that are random-subdomain flood queries")
			fs.Float64Var(&cfg.TCPFlood, "tcp-flood", 0, "fraction of exchanges that are abandoned TCP connections")
			fs.Float64Var(&cfg.Fragments, "fragments", 0, "fraction of UDP answers made large and sent as IP fragments")
			fs.Float64Var(&cfg.Reorder, "reorder", 0, "fraction of TCP connections with reordered and retransmitted segments")
			fs.Float64Var(&cfg.Malformed, "malformed", 0, "fraction of queries cut short inside the question")
			if err := fs.Parse(args); err != nil {
				return err
			}
			if *out == "" || fs.NArg() != 0 {
				return errUsage
			}
			switch *mix {
			case "normal":
			case "signed":
				synth.SignedMix(&cfg)
			case "attack":
				given := map[string]float64{} // fractions on the command line win
				fs.Visit(func(f *flag.Flag) {
					if p, ok := fractions[f.Name]; ok {
						given[f.Name] = *p
					}
				})
				synth.AttackMix(&cfg)
				for name, v := range given {
					*fractions[name] = v
				}
			default:
				return fmt.Errorf("--mix %q: want normal, signed or attack", *mix)
			}
			var err error
			if cfg.Start, err = time.Parse(time.RFC3339, *start); err != nil {
				return fmt.Errorf("--start: %w", err)
			}
			if cfg.MaxBytes, err = parseSize(*size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if cfg.Duration <= 0 && cfg.MaxBytes <= 0 {
				return fmt.Errorf("give --duration or --size")
			}
			f, err := os.Create(*out)
			if err != nil {
				return err
			}
			defer f.Close()
			cw, err := codecs.FromExt(*out).NewWriter(f)
			if err != nil {
				return err
			}
			w, err := pcap.NewWriter(cw, layers.LinkTypeEthernet, 65535, false)
			if err != nil {
				return err
			}
			st, err := synth.Generate(ctx, w, cfg)
			if err != nil {
				return err
			}
			if err := cw.Close(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Printf("%s: %d packets, %d DNS messages (%d UDP, %d TCP), %d bytes of pcap\n",
				*out, st.Packets, st.Messages, st.UDP, st.TCP, st.Bytes)
			return nil
		},
	}
}
