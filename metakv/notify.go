package metakv

import (
	"context"
	"fmt"
	"time"
)

// A Notifier tells the other handles on a store (other servers) that
// something changed, after it committed: PostgreSQL's NOTIFY. A store in
// one process (bbolt) has no others to tell.
type Notifier interface {
	// Notify sends payload on channel to every handle listening.
	Notify(ctx context.Context, channel, payload string) error
	// Listen calls fn with each payload sent on channel, by any handle
	// (this one too), until ctx ends; a lost connection is made again,
	// and fn is called with "" after it, as what came meanwhile is lost.
	Listen(ctx context.Context, channel string, fn func(payload string)) error
}

var _ Notifier = (*Postgres)(nil)

// Notify implements Notifier.
func (p *Postgres) Notify(ctx context.Context, channel, payload string) error {
	if _, err := p.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		return fmt.Errorf("metadata database: notify: %w", err)
	}
	return nil
}

// Listen implements Notifier, on a connection of its own.
func (p *Postgres) Listen(ctx context.Context, channel string, fn func(payload string)) error {
	for first := true; ; first = false {
		err := p.listen(ctx, channel, fn, !first)
		if ctx.Err() != nil {
			return nil
		}
		_ = err // the connection was lost: wait, then listen again
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (p *Postgres) listen(ctx context.Context, channel string, fn func(string), again bool) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it holds a LISTEN.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN "+quoteIdent(channel)); err != nil {
		return err
	}
	if again {
		fn("") // what was sent while no one listened is lost: look again
	}
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}

// quoteIdent quotes a channel name as an SQL identifier.
func quoteIdent(s string) string {
	out := []byte{'"'}
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			out = append(out, '"')
		}
		out = append(out, s[i])
	}
	return string(append(out, '"'))
}
