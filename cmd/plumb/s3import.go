//go:build !agent

package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/plumb-dev/plumb/agent"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/dns/dnstap"
)

// s3Sources lists the objects under s3://BUCKET/PREFIX (with the
// endpoint and credentials the server's --store takes) in name order,
// each a source read from the bucket as it is cut. Each is named by its
// URL without the query, so the spool remembers which were cut into
// finished blocks, and where in an object the last one ended: an import
// run again after a stop or a crash imports nothing twice.
func s3Sources(ctx context.Context, raw string) ([]agent.Source, error) {
	list, where, err := s3Lister(ctx, raw)
	if err != nil {
		return nil, err
	}
	out, err := list(ctx)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no objects under %s; check the bucket and the prefix", where)
	}
	return out, err
}

// s3Lister connects to the bucket of s3://BUCKET/PREFIX and returns what
// lists the objects under the prefix as sources, and the prefix's name.
func s3Lister(ctx context.Context, raw string) (func(context.Context) ([]agent.Source, error), string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", raw, err)
	}
	cfg, err := blob.S3ConfigOf(u)
	if err != nil {
		return nil, "", err
	}
	cfg.Existing = true
	st, err := blob.NewS3(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("import from %s: %w", u.Redacted(), err)
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	return func(ctx context.Context) ([]agent.Source, error) { return listS3(ctx, st, cfg.Bucket, prefix) }, "s3://" + cfg.Bucket + "/" + prefix, nil
}

func listS3(ctx context.Context, st *blob.S3, bucket, prefix string) ([]agent.Source, error) {
	var out []agent.Source
	err := st.Walk(ctx, prefix, func(i blob.Info) error {
		if strings.HasSuffix(i.Key, "/") || i.Size == 0 {
			return nil // a folder's marker, or nothing to cut
		}
		key := i.Key
		out = append(out, agent.Source{
			Name: "s3://" + bucket + "/" + key, Rereadable: true, Size: i.Size,
			Stamp: agent.Stamp{Size: i.Size, ModTime: i.ModTime},
			Open: func() (io.ReadCloser, error) {
				rc, err := st.Open(ctx, key)
				if err != nil {
					return nil, err
				}
				return dnstap.OpenCapture(rc), nil
			},
		})
		return nil
	})
	// ListObjects answers in key order; the agent's order is the import's.
	return out, err
}
