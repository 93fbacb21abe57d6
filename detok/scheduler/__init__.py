"""The scheduler side: `SchedulerClient` (client.py), what a scheduler embeds to hand token ids to
the detok workers, with its replay book and journal (what a replay rebuilds), sharding, the
worker queues and the step logprob columns.

Sharding: worker = the rid's Fibonacci hash scaled to N (`shard_of`), stable across processes and
restarts; consecutive rids spread evenly (three-distance theorem), random rids like a random hash.

Never blocking: each worker socket has a bounded queue; a send that would block is kept in that
worker's backlog (order preserved, retried first on the next call) and the worker is reported in
`send_step`'s return value, so the scheduler can throttle admission. Nothing is waited on.

Exact replay after a worker's death (docs/reliability.md, "How replay works"): the client keeps, per
worker, every request it may have to rebuild - its registration, and the step columns it was sent, in a
`ShardJournal` (by reference, no copy on the hot path) - until the worker has acknowledged the request's
end. A worker process that may have lost state (a pool's replacement process, a standalone worker that
(re)starts) reports `WorkerStatus(synced=False)` and drops token batches until a `Replay` for it
arrives; the client answers with every request of that shard: registrations, all token ids from start 0,
and the ends it had sent. The worker recomputes text and stop decisions; each frontend's `DeltaReceiver`
drops what it already delivered, by char offset. Nothing waits on the dead worker and no request fails
because of it: requests of that shard get their text once a process serves the slot again.
`WorkerStatus` also acknowledges progress (`seq`) and tells which workers are alive. Notices are taken
in `poll()` and at each `send_step`/`flush`, so a replay never waits for `poll`.

A new client resets every worker (a `Replay` for any process, holding nothing): requests a previous
client left there are finished with an error.
"""
