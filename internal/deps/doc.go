// Package deps holds, in its test, what each of Plumb's packages may
// link: the house's rules written once, where a change that breaks them
// fails the build's tests instead of waiting for a review to notice.
//
// The rules are about what a package must not reach, directly or
// through others: a client that pulls in the server, a worker that
// pulls in the scheduler and its metadata, or a parser of outside bytes
// that pulls in the Flight stack would each cost users something (size,
// memory, attack surface, a build that breaks for reasons outside it).
package deps
