// Package program runs a stage's program over one set of inputs: its
// built-ins in process, its executables confined, one after another
// through pipes or, for several inputs or outputs, through named FIFOs.
//
// The server's scheduler and a remote worker both run stages through
// Execute, so a stage behaves the same wherever it is leased: what
// differs between them is only where the inputs come from and where the
// outputs (HashFile) go. Resolve turns a job's program into Steps once,
// when the job is accepted, so that a program an admin has not
// registered is refused then rather than at its first block.
package program
