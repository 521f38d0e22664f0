package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/plumb-dev/plumb/state"
)

// dutyTTL is how long a server holds a duty without renewing it: a
// server that dies hands its duties on within about this long. It renews
// every third of it, and stops the work itself when a third is left
// unrenewed, so two servers never do one duty at once while their clocks
// agree to within that third.
const dutyTTL = 15 * time.Second

// duties runs the work that one server at a time does for every server
// sharing the metadata: scheduling, retention, fsck and the like. With
// the metadata in one bbolt file there is one server, and it does all of
// it from the start.
type duties struct {
	db     *state.DB
	shared bool   // the metadata is in PostgreSQL, perhaps shared
	holder string // names this process among the servers
	ttl    time.Duration
	log    *slog.Logger
	now    func() time.Time
}

func newDuties(db *state.DB, shared bool, listen string, ttl time.Duration, log *slog.Logger, now func() time.Time) *duties {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s %s pid %d boot %08x", host, listen, os.Getpid(), rand.Uint32())
	return &duties{db: db, shared: shared, holder: holder, ttl: cmp.Or(ttl, dutyTTL), log: log, now: now}
}

// run does fn while this server holds the duty name, until ctx ends:
// fn's context ends when the duty is lost (the metadata unreachable for
// too long, or the duty taken by another after this server stalled), and
// fn runs again when the duty is taken again. A duty given up at
// shutdown passes to another server at once.
func (d *duties) run(ctx context.Context, name string, fn func(context.Context)) {
	if !d.shared {
		fn(ctx)
		return
	}
	log := d.log.With("duty", name)
	for ctx.Err() == nil {
		duty, err := d.db.HoldDuty(ctx, name, d.holder, d.ttl)
		if err != nil {
			if !errors.Is(err, state.ErrDutyHeld) && ctx.Err() == nil {
				log.Warn("could not take a duty; trying again", "err", err)
			}
			d.wait(ctx)
			continue
		}
		log.Info("took a duty: this server does it for all", "term", duty.Term)
		why := d.hold(ctx, duty, fn)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := d.db.ReleaseDuty(rctx, name, d.holder); err != nil {
				log.Warn("could not give a duty up at shutdown; another server takes it when its time runs out", "err", err, "within", d.ttl)
			}
			cancel()
			return
		}
		log.Warn("lost a duty; another server may take it", "why", why)
		d.wait(ctx)
	}
}

// hold runs fn while it renews duty, and says why it stopped.
func (d *duties) hold(ctx context.Context, duty state.Duty, fn func(context.Context)) string {
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fn(fctx) }()
	defer func() { cancel(); <-done }()
	tick := time.NewTicker(d.ttl / 3)
	defer tick.Stop()
	until := duty.Until
	for {
		select {
		case <-ctx.Done():
			return "shutdown"
		case <-done:
			return "its work stopped by itself"
		case <-tick.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, d.ttl/3)
		next, err := d.db.HoldDuty(rctx, duty.Name, d.holder, d.ttl)
		rcancel()
		switch {
		case err == nil && next.Term == duty.Term:
			until = next.Until
			continue
		case err == nil:
			return fmt.Sprintf("its hold lapsed (term %d, now %d): another server may have done it meanwhile", duty.Term, next.Term)
		case errors.Is(err, state.ErrDutyHeld):
			return err.Error()
		}
		if ctx.Err() != nil {
			return "shutdown"
		}
		// The metadata unreachable: the work goes on while the hold has
		// time left, and stops before another server could take it.
		if left := until.Sub(d.now()); left < d.ttl/3 {
			return fmt.Sprintf("the metadata unreachable for too long: %v", err)
		}
		d.log.Warn("could not renew a duty; still held", "duty", duty.Name, "err", err, "until", until)
	}
}

// wait waits a third of the TTL, give or take a little so that servers
// started together do not ask together.
func (d *duties) wait(ctx context.Context) {
	t := time.NewTimer(d.ttl/3 + rand.N(d.ttl/10))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
