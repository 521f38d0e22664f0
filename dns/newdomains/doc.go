// Package newdomains remembers which domains a site has asked for over a
// horizon of event time (30 days, say), in memory bounded by a stated
// false-positive rate, so that builtin:newdomains can report the first
// time each one is seen: newly observed domains, a staple of resolver
// security monitoring.
//
// The memory is a rotating Bloom filter (Seen): the horizon is split
// into generations, each a Bloom filter sized for a number of domains;
// a domain is known if any generation holds it, and a generation older
// than the horizon is let go of, so a domain not asked for in a horizon
// is new again. Its state is bytes (MarshalBinary) that the stage
// carries from one block of a site to the next, committed with the
// block's rows, so it survives restarts and a block is never counted
// twice.
package newdomains
