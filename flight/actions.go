package flight

import "sort"

// Action is one of the protocol's DoActions, named once here for both
// sides: the server registers its handler against it and the client calls
// through it, so a name is never spelled twice and a limit never drifts.
// Its body is JSON; the request and answer types are this package's.
type Action struct {
	// Name is the Flight action type.
	Name string
	// Doc is what ListActions describes it as: the body it takes and what
	// it answers.
	Doc string
	// MaxBody caps the raw body in bytes, checked before it is decoded
	// (DefaultMaxBody when 0): decoding a 60 MiB body of JSON took
	// gigabytes, for a caller with no right at all.
	MaxBody int
	// Admin: only an admin on "*" may call it, checked before the body is
	// looked at. Other actions check the caller's right on the queue the
	// body names.
	Admin bool
}

// Limit is the most body bytes the action takes.
func (a Action) Limit() int {
	if a.MaxBody == 0 {
		return DefaultMaxBody
	}
	return a.MaxBody
}

// Body caps: most bodies name a queue, a group or a block; an ack may name
// many blocks, a job file is up to 256 KiB of YAML that JSON may escape to
// six times its size, a stream's state is up to 64 KiB.
const (
	DefaultMaxBody = 64 << 10
	AckMaxBody     = 1 << 20
	JobMaxBody     = 1536 << 10
	StateMaxBody   = 512 << 10
)

// The actions.
var (
	ActAck = Action{
		Name:    "ack",
		Doc:     `Acknowledge blocks for a consumer group so they are not handed out again. Body {"queue","group","blocks":[NAME,...]}; answers {"acked": N}.`,
		MaxBody: AckMaxBody,
	}
	ActNack = Action{
		Name:    "nack",
		Doc:     `Give blocks a consumer group's reader holds but could not finish back to the group at once, for any of its readers to take next, instead of after the visibility timeout; the attempt stays counted. Body {"queue","group","blocks":[NAME,...],"reader"}; answers {"released": N}, the blocks that were held. With "reader" (a ticket's), every block that read holds unacked goes back too, those it read ahead included.`,
		MaxBody: AckMaxBody,
	}
	ActGroupList = Action{
		Name: "group-list",
		Doc:  `A queue's consumer groups: owner, created, last used, and the deliveries unreserved, reserved, done and faulty; a non-admin sees their own. Body {"queue"}; one result each.`,
	}
	ActGroupDelete = Action{
		Name: "group-delete",
		Doc:  `Delete a consumer group (its creator or an admin; not a stage's), releasing the blocks it was owed. Body {"queue","group"}.`,
	}
	ActQueueStats = Action{
		Name: "queue-stats",
		Doc:  `Counts for one queue: blocks, bytes, and per consumer group the deliveries unreserved, reserved, done and faulty. Body {"queue"}.`,
	}
	ActLastSeq = Action{
		Name: "last-seq",
		Doc:  `The highest sequence number stored for an instance, so an agent that lost its state never reuses one. Body {"queue","instance"}; answers {"seq": N, "found": bool, "ended": bool}, ended when the server ended the site's capture with that block (site-end).`,
	}
	ActListBlocks = Action{
		Name: "list-blocks",
		Doc:  `The blocks of a queue in arrival order, one JSON result each. Body {"queue","after":SERIAL,"limit":N}.`,
	}
	ActSubmitJob = Action{
		Name:    "submit-job",
		Doc:     `Submit a job (YAML). Body {"file","yaml"}; answers {"job","state":"accepted"|"rejected","reason","warnings","stages"}.`,
		MaxBody: JobMaxBody,
	}
	ActProgramAdd = Action{
		Name:  "program-add",
		Doc:   `Register an executable on the server for jobs to name (admin). Body {"name","path","sha256","network"}; answers the program.`,
		Admin: true,
	}
	ActProgramList = Action{
		Name: "program-list",
		Doc:  `The registered programs, one result each.`,
	}
	ActProgramRemove = Action{
		Name:  "program-remove",
		Doc:   `Unregister a program no accepted job runs (admin). Body {"name"}.`,
		Admin: true,
	}
	ActRetractJob = Action{
		Name: "retract-job",
		Doc:  `Retract an accepted job; its stages stop unless another job owns them. Body {"job"}.`,
	}
	ActListJobs = Action{
		Name: "list-jobs",
		Doc:  `Every submitted job with its state, reason and warnings, one result each.`,
	}
	ActGraph = Action{
		Name: "graph",
		Doc:  `The merged graph. Body {"format":"yaml"|"dot"}; answers {"yaml"} or {"dot"}.`,
	}
	ActStats = Action{
		Name: "stats",
		Doc:  `Per stage: backlog, workers, runs, bytes in and out, processing and CPU seconds, I/O intensity; one result each.`,
	}
	ActFaulty = Action{
		Name: "faulty",
		Doc:  `Blocks set aside after their last attempt, with the error kept; one result each. Body {"queue"} or {} for all.`,
	}
	ActWindows = Action{
		Name: "windows",
		Doc:  `Window stages' windows: waiting ones with present and missing blocks, max_wait deadline and what a strict order waits for; fired ones with revision, reason, missing and late blocks. Body {"stage"} or {}.`,
	}
	ActFireWindow = Action{
		Name: "fire-window",
		Doc:  `Fire a waiting window now with what it holds. Body {"stage","window":"SITE/INDEX"}.`,
	}
	ActPeekNext = Action{
		Name: "peek-next",
		Doc:  `Where a stream consumer stands: the next sequence number, whether it is present, the gap (1 present, k+1 with k missing, 0 caught up, negative for a late block behind the cursor), late blocks, and nanoseconds since it last advanced. Body {"queue","instance","consumer","from"}.`,
	}
	ActProcessNext = Action{
		Name: "process-next",
		Doc:  `The block at a stream consumer's cursor and its ticket; commit it to advance. Body {"queue","instance","consumer"}.`,
	}
	ActCommit = Action{
		Name: "commit",
		Doc:  `Advance a stream consumer past the block it processed. Body {"queue","instance","consumer","seq"}.`,
	}
	ActSkip = Action{
		Name: "skip",
		Doc:  `Move a stream consumer past a missing block on purpose; the skip is recorded. Body {"queue","instance","consumer"}.`,
	}
	ActPutState = Action{
		Name:    "put-state",
		Doc:     `Set keys of a stream consumer's small state (an empty value deletes). Body {"queue","instance","consumer","state":{...}}.`,
		MaxBody: StateMaxBody,
	}
	ActGetState = Action{
		Name: "get-state",
		Doc:  `A stream consumer's cursor, state, skips and checkpoint. Body {"queue","instance","consumer"}.`,
	}
	ActDeleteState = Action{
		Name: "delete-state",
		Doc:  `Delete a stream consumer (its owner or an admin), releasing the blocks its cursor held. Body {"queue","instance","consumer"}.`,
	}
	ActListState = Action{
		Name: "list-state",
		Doc:  `Every stream consumer of a queue with its cursor and state, one result each. Body {"queue"}.`,
	}
	ActCheckpoint = Action{
		Name:    "checkpoint",
		Doc:     `Save a stream consumer's cursor and state together (with "state" given, that state; with "seq", at that next block instead of the cursor, never past it but for the block at the cursor a stream has sent and not yet committed); a stream from "checkpoint" resumes there. Body {"queue","instance","consumer","state","seq"}.`,
		MaxBody: StateMaxBody,
	}
	ActSetRetention = Action{
		Name: "set-retention",
		Doc:  `Set how long a queue keeps its blocks (admin): {"queue","retention":"forever"|"30d"|"500GiB"|"30d,500GiB"|"","drop_unconsumed":bool}. Blocks past it go unless a subscriber still owes them (drop_unconsumed: they go anyway and the subscriber's delivery becomes LOST). Queues a stage produces keep what its job says.`,
	}
	ActRetention = Action{
		Name: "retention",
		Doc:  `Every queue's retention policy; one result each.`,
	}
	ActFsck = Action{
		Name:  "fsck",
		Doc:   `Check metadata against blobs (admin on "*"): blocks whose blob is missing or (with verify) corrupt, blobs no block names. Body {"repair":bool,"verify":bool,"grace_seconds":N}; repair deletes orphan blobs older than the grace (1 h) and marks broken blocks lost.`,
		Admin: true,
	}
	ActRotateTokenKey = Action{
		Name:  "rotate-token-key",
		Doc:   `Make a new key for signing login tokens (admin on "*"), on every server sharing the metadata within seconds. Body {"keep":bool}: keep, the old key still verifies the tokens it signed until they expire (a routine rotation); without it every token signed before is refused at once (a key that leaked). API keys are not tokens and stay good.`,
		Admin: true,
	}
	ActStoreList = Action{
		Name:  "store-list",
		Doc:   `The blob stores (admin on "*"): name, URL, primary, draining, free and total bytes when the store can tell; one result each.`,
		Admin: true,
	}
	ActStoreAdd = Action{
		Name:  "store-add",
		Doc:   `Add a blob store (admin on "*"): {"name","url":"file:///DIR"|"s3://BUCKET?endpoint=HOST:PORT"}. New blocks go to the store with the most free space.`,
		Admin: true,
	}
	ActStoreRemove = Action{
		Name:  "store-remove",
		Doc:   `Forget an empty store (admin on "*"): {"name"}; drain it first.`,
		Admin: true,
	}
	ActStoreDrain = Action{
		Name:  "store-drain",
		Doc:   `Move every blob of a store to the others while reads go on (admin on "*"): {"name","deadline_seconds":30,"workers":4}. The store takes no new blocks from the start; answers {"moved","bytes","left":[KEY...],"seconds"} — left are the blobs not moved by the deadline.`,
		Admin: true,
	}
	ActLease = Action{
		Name:  "lease",
		Doc:   `For workers (admin on "*"): take a stage run. Body {"worker","host","slots","stages":PATTERN,"missing":[PROGRAM...]}; answers a lease {"lease","stage","program","inputs","outputs","ttl_ns"}, or {} when there was no work for 5 s. Read inputs with block tickets, upload outputs with DoPut {"queue","instance","lease"}, then commit-lease; heartbeat within the TTL.`,
		Admin: true,
	}
	ActHeartbeat = Action{
		Name:  "heartbeat",
		Doc:   `For workers: keep a lease alive. Body {"lease"}; FAILED_PRECONDITION when it expired (stop: the run went elsewhere).`,
		Admin: true,
	}
	ActCommitLease = Action{
		Name:    "commit-lease",
		Doc:     `For workers: publish a lease's staged outputs and release its inputs at once. Body {"lease","outputs":[{"queue","size","sha256"}]}; refused when the lease expired, so only one run publishes.`,
		MaxBody: AckMaxBody,
		Admin:   true,
	}
	ActFailLease = Action{
		Name:    "fail-lease",
		Doc:     `For workers: report a failed run (retried with backoff, FAULTY after the last attempt). Body {"lease","error"}.`,
		MaxBody: AckMaxBody,
		Admin:   true,
	}
	ActWorkers = Action{
		Name:  "workers",
		Doc:   `The remote workers seen lately: host, slots, the runs each holds, last heartbeat, runs done and lost; one result each.`,
		Admin: true,
	}
	ActLost = Action{
		Name: "lost",
		Doc:  `Blocks a queue's retention dropped before a group was done with them. Body {"queue","group"}; one result each.`,
	}
	ActReadAdmission = Action{
		Name: "read-admission",
		Doc:  `How honest the read admission's estimates are: transfers, those that took longer than estimated, reads refused as hopeless, actual÷estimated time p50/p99, and the rate assumed now.`,
	}
	ActStatus = Action{
		Name: "status",
		Doc:  `How far behind each stage and consumer group is: backlog, workers, age of the oldest block owed, and arrival-to-output (or delivery) and event-to-output p50/p99 over the last hour; one result each.`,
	}
	ActSiteOwners = Action{
		Name: "site-owners",
		Doc:  `Who may put blocks into each site (an instance of a queue): its first writer, or the user an admin assigned; others' puts are refused. Body {"queue"} or {} for every queue you may read or write; one result each.`,
	}
	ActSiteAssign = Action{
		Name: "site-assign",
		Doc:  `Assign a site to a user, or with "user":"" leave it unowned for its next writer (admin of the queue). Body {"queue","instance","user"}.`,
	}
	ActSiteEnd = Action{
		Name: "site-end",
		Doc:  `End a site's capture (admin of the queue): the server appends an empty capture block marked final after the site's last, as its agent does when stopped for good, so stages let go of what they hold for it (a TCP message behind a hole). For a site whose agent died; an agent that comes back ships after it. Body {"queue","instance"}; answers the block, with "ended": false when the last block was already final.`,
	}
	ActRetry = Action{
		Name: "retry",
		Doc:  `Requeue faulty blocks: {"queue","block"} for one, {"queue"} for a queue's, {} for all; answers {"requeued": N}.`,
	}
)

// Actions is every action, sorted by name.
var Actions = sortedActions(
	ActAck,
	ActNack,
	ActGroupList,
	ActGroupDelete,
	ActQueueStats,
	ActLastSeq,
	ActListBlocks,
	ActSubmitJob,
	ActProgramAdd,
	ActProgramList,
	ActProgramRemove,
	ActRetractJob,
	ActListJobs,
	ActGraph,
	ActStats,
	ActFaulty,
	ActWindows,
	ActFireWindow,
	ActPeekNext,
	ActProcessNext,
	ActCommit,
	ActSkip,
	ActPutState,
	ActGetState,
	ActDeleteState,
	ActListState,
	ActCheckpoint,
	ActSetRetention,
	ActRetention,
	ActFsck,
	ActRotateTokenKey,
	ActStoreList,
	ActStoreAdd,
	ActStoreRemove,
	ActStoreDrain,
	ActLease,
	ActHeartbeat,
	ActCommitLease,
	ActFailLease,
	ActWorkers,
	ActLost,
	ActReadAdmission,
	ActStatus,
	ActSiteOwners,
	ActSiteAssign,
	ActSiteEnd,
	ActRetry,
)

func sortedActions(as ...Action) []Action {
	sort.Slice(as, func(i, j int) bool { return as[i].Name < as[j].Name })
	return as
}

// ActionNamed finds an action by its name.
func ActionNamed(name string) (Action, bool) {
	i := sort.Search(len(Actions), func(i int) bool { return Actions[i].Name >= name })
	if i < len(Actions) && Actions[i].Name == name {
		return Actions[i], true
	}
	return Action{}, false
}
