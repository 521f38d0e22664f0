package blob

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is a Store in an S3-compatible bucket (MinIO, or a cloud bucket).
//
// Each Put is one PUT of the exact size with the declared SHA-256 sent as
// x-amz-checksum-sha256: the server verifies it before the object becomes
// visible and keeps it with the object, so a block is checked end to end
// and a mismatched or interrupted upload never appears under its key.
// Single PUTs go up to 5 GiB, far beyond Plumb's block sizes.
type S3 struct {
	client *minio.Client
	bucket string
	url    string
}

var _ Store = (*S3)(nil)

// OpenS3 opens s3://BUCKET?endpoint=HOST:PORT[&secure=true][&region=R].
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or
// MINIO_ROOT_USER / MINIO_ROOT_PASSWORD. The bucket is created if missing.
func OpenS3(ctx context.Context, u *url.URL) (*S3, error) {
	cfg, err := S3ConfigOf(u)
	if err != nil {
		return nil, err
	}
	return NewS3(ctx, cfg)
}

// S3ConfigOf reads s3://BUCKET[/…]?endpoint=HOST:PORT[&secure=true][&region=R]
// with the credentials of the environment, as OpenS3 does. Without
// ?endpoint=, AWS_ENDPOINT_URL (http://HOST:PORT or https://…) names it,
// as it does for the AWS tools.
func S3ConfigOf(u *url.URL) (S3Config, error) {
	q := u.Query()
	cfg := S3Config{Endpoint: q.Get("endpoint"), Bucket: u.Host, Secure: q.Get("secure") == "true", Region: q.Get("region")}
	if ep := os.Getenv("AWS_ENDPOINT_URL"); cfg.Endpoint == "" && ep != "" {
		eu, err := url.Parse(ep)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
			return cfg, fmt.Errorf("AWS_ENDPOINT_URL %q: want http://HOST:PORT or https://HOST:PORT", ep)
		}
		cfg.Endpoint, cfg.Secure = eu.Host, eu.Scheme == "https"
	}
	if u.Host == "" || cfg.Endpoint == "" {
		return cfg, fmt.Errorf("S3 URL %q: want s3://BUCKET?endpoint=HOST:PORT (or AWS_ENDPOINT_URL set)", u.Redacted())
	}
	cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if cfg.AccessKey == "" {
		cfg.AccessKey, cfg.SecretKey = os.Getenv("MINIO_ROOT_USER"), os.Getenv("MINIO_ROOT_PASSWORD")
	}
	if cfg.AccessKey == "" {
		return cfg, fmt.Errorf("%s: no credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", u.Redacted())
	}
	return cfg, nil
}

// S3Config configures an S3 store.
type S3Config struct {
	Endpoint  string // host:port
	Bucket    string
	AccessKey string
	SecretKey string
	Secure    bool // https
	Region    string
	// Existing refuses a bucket that is not there instead of creating
	// it: a bucket to read from (plumb import s3://…).
	Existing bool
}

// NewS3 connects to the bucket, creating it if it does not exist.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
		Region: cfg.Region,
		// Needed for checksum headers on PUT.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %s: %w", cfg.Endpoint, err)
	}
	s := &S3{client: c, bucket: cfg.Bucket, url: fmt.Sprintf("s3://%s?endpoint=%s", cfg.Bucket, cfg.Endpoint)}
	// A server that has just started answers "not initialized" for a few
	// seconds (MinIO does while it formats its disks): wait for it.
	var ok bool
	for deadline := time.Now().Add(30 * time.Second); ; {
		ok, err = c.BucketExists(ctx, cfg.Bucket)
		if err == nil || !strings.Contains(err.Error(), "not initialized") || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %w (is the server up and are the credentials right?)", s, err)
	}
	if !ok && cfg.Existing {
		return nil, fmt.Errorf("bucket %s at %s does not exist (or these credentials cannot see it)", cfg.Bucket, cfg.Endpoint)
	}
	if !ok {
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, fmt.Errorf("store %s: create bucket: %w", s, err)
		}
	}
	return s, nil
}

func (s *S3) String() string { return s.url }

// Close implements Store.
func (s *S3) Close() error { return nil }

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, sum Sum) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	v := newVerifier(ctx, r, size)
	_, err := s.client.PutObject(ctx, s.bucket, key, v, size, minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: true,
		// The payload is protected by the SHA-256 checksum header, so the
		// per-chunk signature hashing would only hash it twice.
		DisableContentSha256: true,
		UserMetadata: map[string]string{
			"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(sum[:]),
		},
	})
	if err != nil {
		if v.err != nil && !errors.Is(v.err, io.EOF) {
			// The source failed or broke its declaration; say so rather
			// than what the HTTP client made of it.
			return fmt.Errorf("store %s: put %s: %w", s, key, v.err)
		}
		if v.n == size {
			if verr := v.check(sum); verr != nil {
				return fmt.Errorf("store %s: %s: %w", s, key, verr)
			}
		}
		return fmt.Errorf("store %s: put %s: %w", s, key, err)
	}
	return v.check(sum)
}

func (s *S3) notFound(key string, err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code == "NoSuchKey" || resp.StatusCode == 404) {
		return fmt.Errorf("store %s: %s: %w", s, key, ErrNotFound)
	}
	return fmt.Errorf("store %s: %s: %w", s, key, err)
}

// Open implements Store. The object is streamed, never held in memory.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.notFound(key, err)
	}
	// GetObject is lazy; Stat surfaces a missing key now rather than on the
	// first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, s.notFound(key, err)
	}
	return obj, nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := CheckKey(key); err != nil {
		return Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.notFound(key, err)
	}
	return Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(s.notFound(key, err), ErrNotFound) {
		return fmt.Errorf("store %s: delete %s: %w", s, key, err)
	}
	return nil
}

// List implements Store; the owner's record (OwnerKey) and the Iceberg
// tables' files (under TablesPrefix) are not listed.
func (s *S3) List(ctx context.Context, fn func(Info) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("store %s: list: %w", s, oi.Err)
		}
		if oi.Key == OwnerKey || strings.HasPrefix(oi.Key, TablesPrefix) {
			continue // the store's own, not blobs (see Claim and TablesPrefix)
		}
		if err := fn(Info{Key: oi.Key, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	return nil
}

// TablesPrefix is where in a bucket the Iceberg tables of the lake
// queues keep their metadata and compacted files (package laketable).
// They are not blobs: List leaves them out, so fsck never takes them for
// orphans.
const TablesPrefix = "plumb-iceberg/"

// Location implements Locator: s3://BUCKET/KEY, as query engines name
// an object.
func (s *S3) Location(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return "s3://" + s.bucket + "/" + key, nil
}

// Bucket is the store's bucket.
func (s *S3) Bucket() string { return s.bucket }

// An Object is an object opened for reading anywhere in it (a Parquet
// file's footer, then its column chunks), one ranged GET per read.
type Object struct {
	*minio.Object
	size int64
	mod  time.Time
}

// Size is the object's size in bytes.
func (o *Object) Size() int64 { return o.size }

// ModTime is when the object was written.
func (o *Object) ModTime() time.Time { return o.mod }

// OpenObject opens key for reads anywhere in it.
func (s *S3) OpenObject(ctx context.Context, key string) (*Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.notFound(key, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, s.notFound(key, err)
	}
	return &Object{Object: obj, size: oi.Size, mod: oi.LastModified}, nil
}

// Walk calls fn with each object whose key starts with prefix, the
// store's own (TablesPrefix) included.
func (s *S3) Walk(ctx context.Context, prefix string, fn func(Info) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("store %s: list %s: %w", s, prefix, oi.Err)
		}
		if err := fn(Info{Key: oi.Key, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	return nil
}
