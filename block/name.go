// Package block holds the identity of a block: its name, how the name is
// parsed, formatted and validated, and the queue and instance names inside it.
//
// A block name is YYYYMMDD-HHMMSS-SEQ[-INFO].INSTANCE.QUEUE. Every name that
// enters Plumb (from a client, a file or a job) is parsed here before it is
// used for anything, so no other package ever builds a path or a key from an
// unvalidated string.
package block

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits on the parts of a name. They keep names usable as file names and
// object keys on every store Plumb writes to.
const (
	MaxInstanceLen = 64
	MaxInfoLen     = 64
	MaxQueueLen    = 128
	MaxNameLen     = 255
	// SeqDigits is the width a sequence number is zero-padded to.
	SeqDigits = 8
	// MaxSourceSeq is the largest sequence number a block put into a
	// queue may have; the smallest is 1. Readers count on the number
	// after a block's (a stream's cursor, a gap's end) and on 0 meaning
	// "none yet"; 0 and 2^64-1 broke both.
	MaxSourceSeq = 1<<63 - 1
)

const timeLayout = "20060102-150405"

// ErrInvalidName marks every error about a malformed name, so callers can
// tell bad input from failures of their own.
var ErrInvalidName = errors.New("invalid name")

// ID is the identity of a block: two blocks with the same ID are the same
// block, and must have the same bytes.
type ID struct {
	Queue    string
	Instance string
	Seq      uint64
}

func (id ID) String() string {
	return fmt.Sprintf("%s/%s/%d", id.Queue, id.Instance, id.Seq)
}

// Name is a parsed block name.
type Name struct {
	Time     time.Time // event time of the first packet, UTC, whole seconds
	Seq      uint64
	Info     string // optional; no dots
	Instance string
	Queue    string
}

// ID returns the identity of the named block.
func (n Name) ID() ID { return ID{Queue: n.Queue, Instance: n.Instance, Seq: n.Seq} }

// String formats the name in its canonical form.
func (n Name) String() string {
	var b strings.Builder
	b.WriteString(n.Time.UTC().Format(timeLayout))
	b.WriteByte('-')
	s := strconv.FormatUint(n.Seq, 10)
	for i := len(s); i < SeqDigits; i++ {
		b.WriteByte('0')
	}
	b.WriteString(s)
	if n.Info != "" {
		b.WriteByte('-')
		b.WriteString(n.Info)
	}
	b.WriteByte('.')
	b.WriteString(n.Instance)
	b.WriteByte('.')
	b.WriteString(n.Queue)
	return b.String()
}

// Validate checks every part of n, as Parse would.
func (n Name) Validate() error {
	if err := ValidateInstance(n.Instance); err != nil {
		return err
	}
	if err := ValidateQueue(n.Queue); err != nil {
		return err
	}
	if n.Info != "" {
		if err := validatePart("info", n.Info, MaxInfoLen, false); err != nil {
			return err
		}
	}
	if y := n.Time.UTC().Year(); y < 1970 || y > 9999 {
		return fmt.Errorf("%w: event time %s is outside 1970..9999", ErrInvalidName, n.Time)
	}
	return nil
}

// Parse parses and validates a block name. The error says which part is
// wrong and what the expected form is.
func Parse(s string) (Name, error) {
	fail := func(format string, args ...any) (Name, error) {
		return Name{}, fmt.Errorf("%w %q: %s (want YYYYMMDD-HHMMSS-SEQ[-INFO].INSTANCE.QUEUE)",
			ErrInvalidName, truncate(s), fmt.Sprintf(format, args...))
	}
	if len(s) > MaxNameLen {
		return fail("longer than %d bytes", MaxNameLen)
	}
	if err := checkChars(s, true); err != nil {
		return fail("%v", err)
	}
	if len(s) < len(timeLayout)+2 || s[len(timeLayout)] != '-' {
		return fail("does not start with a YYYYMMDD-HHMMSS time")
	}
	t, err := time.Parse(timeLayout, s[:len(timeLayout)])
	if err != nil {
		return fail("bad event time: %v", err)
	}
	rest := s[len(timeLayout)+1:]
	head, tail, ok := strings.Cut(rest, ".")
	if !ok {
		return fail("no instance and queue after the sequence number")
	}
	seqStr, info, hasInfo := strings.Cut(head, "-")
	if seqStr == "" || len(seqStr) > 20 || strings.Trim(seqStr, "0123456789") != "" {
		return fail("sequence number %q is not 1 to 20 decimal digits", seqStr)
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return fail("sequence number %q does not fit 64 bits", seqStr)
	}
	if hasInfo && info == "" {
		return fail("empty info after '-'")
	}
	instance, queue, ok := strings.Cut(tail, ".")
	if !ok {
		return fail("no queue after the instance")
	}
	n := Name{Time: t, Seq: seq, Info: info, Instance: instance, Queue: queue}
	if err := n.Validate(); err != nil {
		return fail("%s", strings.TrimPrefix(err.Error(), ErrInvalidName.Error()+": "))
	}
	return n, nil
}

// ValidateQueue checks a queue name: letters, digits, '_', '-' and '.', at
// most MaxQueueLen bytes, no empty dot-separated part (so no "..", and no
// leading or trailing dot).
func ValidateQueue(q string) error {
	return validatePart("queue", q, MaxQueueLen, true)
}

// ValidateInstance checks an instance (site or capture host) name: letters,
// digits, '_' and '-', at most MaxInstanceLen bytes.
func ValidateInstance(s string) error {
	return validatePart("instance", s, MaxInstanceLen, false)
}

// ValidateGroup checks a consumer group name; it follows the instance rules.
func ValidateGroup(s string) error {
	return validatePart("group", s, MaxInstanceLen, false)
}

func validatePart(what, s string, max int, dots bool) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidName, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s %q is longer than %d bytes", ErrInvalidName, what, truncate(s), max)
	}
	if err := checkChars(s, dots); err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalidName, what, truncate(s), err)
	}
	if dots {
		for _, p := range strings.Split(s, ".") {
			if p == "" {
				return fmt.Errorf("%w: %s %q has an empty part (leading, trailing or double dot)", ErrInvalidName, what, s)
			}
		}
	}
	return nil
}

func checkChars(s string, dots bool) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		case c == '.' && dots:
		default:
			return fmt.Errorf("byte %q at offset %d is not allowed (letters, digits, '_', '-'%s)", c, i, map[bool]string{true: ", '.'"}[dots])
		}
	}
	if dots && strings.Contains(s, "..") {
		return errors.New(`".." is not allowed`)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// MaxSampleRate is the largest sampling rate a block may say it was
// sampled at (one packet flow in MaxSampleRate kept).
const MaxSampleRate = 1 << 24

// SampleInfo is the Info of a block whose capture was sampled at one
// flow in rate (rate > 1): "s" and the rate, e.g. "s100".
func SampleInfo(rate uint32) string {
	if rate <= 1 {
		return ""
	}
	return "s" + strconv.FormatUint(uint64(rate), 10)
}

// SampleRate is the rate the block's capture was sampled at, as its Info
// says (SampleInfo): 1 when it was not sampled, or says nothing that
// reads as a rate.
func (n Name) SampleRate() uint32 {
	digits, ok := strings.CutPrefix(n.Info, "s")
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 8 {
		return 1
	}
	r, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || r < 1 || r > MaxSampleRate {
		return 1
	}
	return uint32(r)
}
