// Package dns holds the built-in stages that turn captures into DNS rows:
// builtin:dns (one record per message) and builtin:dnspairs (a query and
// its response as one transaction). They sit apart from package builtin so
// that `plumb dns` in the agent build links them without Parquet.
package dns
