package state

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/plumb-dev/plumb/metakv"
)

// JobState is where a submitted job stands.
type JobState string

// The states of a job.
const (
	JobAccepted  JobState = "accepted"
	JobRejected  JobState = "rejected"
	JobRetracted JobState = "retracted"
)

// Job is a submitted job as stored: its YAML source and its fate. The
// merged graph is rebuilt from the accepted jobs in Order.
type Job struct {
	Name      string    `json:"name"`
	Owner     string    `json:"owner,omitempty"`
	OwnerID   string    `json:"owner_id,omitempty"` // the owner's stable id (see pipeline.Job)
	State     JobState  `json:"state"`
	Reason    string    `json:"reason,omitempty"`   // why it was rejected
	Warnings  []string  `json:"warnings,omitempty"` // advice given when accepted
	Source    string    `json:"source"`
	Submitted time.Time `json:"submitted"`
	Changed   time.Time `json:"changed"`
	// Order is the job's place in the merge: a later job merges into the
	// stages of earlier ones.
	Order uint64 `json:"order"`
	// Trusted says the job may name executables the program registry
	// does not hold: it was submitted by an admin, or to a server
	// without users.
	Trusted bool `json:"trusted,omitempty"`
	// Suspended, when set, says why an accepted job's stages do not run
	// now: its owner was removed or lost a right the job needs. The job
	// resumes where it stopped when the right returns.
	Suspended string `json:"suspended,omitempty"`
}

var bucketJobs = []byte("jobs")

// PutJob stores a job's new version; an accepted job gets the next merge
// order unless it already had one. It returns the job as stored.
func (d *DB) PutJob(j Job) (Job, error) {
	err := d.kv.Update(context.Background(), func(tx metakv.Tx) error {
		jobs, err := tx.CreateBucketIfNotExists(bucketJobs)
		if err != nil {
			return err
		}
		old, ok, err := getRecord[Job](jobs, []byte(j.Name))
		if err != nil {
			return err
		}
		now := d.now().UTC()
		j.Changed = now
		if j.Submitted.IsZero() {
			j.Submitted = now
		}
		if j.State == JobAccepted {
			if ok && old.State == JobAccepted && old.Order != 0 {
				j.Order = old.Order
			} else if j.Order, err = jobs.NextSequence(); err != nil {
				return err
			}
		}
		if err := putRecord(jobs, []byte(j.Name), j); err != nil {
			return err
		}
		return bumpJobsVersion(tx)
	})
	return j, err
}

var keyJobsVersion = []byte("jobs-version")

// bumpJobsVersion counts a change of the jobs, so that every server
// sharing the metadata sees the graph changed (JobsVersion).
func bumpJobsVersion(tx metakv.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	var n uint64
	if v := meta.Get(keyJobsVersion); len(v) == 8 {
		n = bytesU64(v)
	}
	return meta.Put(keyJobsVersion, u64(n+1))
}

// JobsVersion counts the changes of the jobs: an engine whose graph was
// built at another version builds it again, since another server sharing
// the metadata took a job or let one go.
func (d *DB) JobsVersion() (uint64, error) {
	var n uint64
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := meta.Get(keyJobsVersion); len(v) == 8 {
				n = bytesU64(v)
			}
		}
		return nil
	})
	return n, err
}

// GetJob returns one job.
func (d *DB) GetJob(name string) (Job, error) {
	var out Job
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		j, ok, err := getRecord[Job](tx.Bucket(bucketJobs), []byte(name))
		if err == nil && !ok {
			err = fmt.Errorf("job %q: %w", name, ErrNotFound)
		}
		out = j
		return err
	})
	return out, err
}

// Jobs lists every job, accepted ones in merge order first.
func (d *DB) Jobs() ([]Job, error) {
	var out []Job
	err := d.kv.View(context.Background(), func(tx metakv.Tx) error {
		b := tx.Bucket(bucketJobs)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			out = append(out, j)
			return nil
		})
	})
	sort.SliceStable(out, func(a, b int) bool {
		ja, jb := out[a], out[b]
		if (ja.State == JobAccepted) != (jb.State == JobAccepted) {
			return ja.State == JobAccepted
		}
		if ja.State == JobAccepted {
			return ja.Order < jb.Order
		}
		return ja.Name < jb.Name
	})
	return out, err
}
