/*
 * soak.h -- `make soak` (issue 17; the adversary of issues 38 and 43):
 * worker processes take every lock kind on private redis-servers (or the
 * kinds etcd offers on a private 3-member etcd cluster: --topology etcd)
 * under a random fault schedule, logging each critical section and each
 * count change; a checker reads the logs, the fault log and the stores
 * afterwards. soak.c runs the schedule and the Redis topologies, etcd.c
 * the etcd topology's members and faults, worker.c is one worker process,
 * wire.c the wire adversary (a proxy in front of every Redis data node:
 * late copies, held replies, cut connections), checker.c judges.
 *
 * Times are CLOCK_MONOTONIC microseconds, one clock for every process on
 * the machine, so intervals of different workers compare directly.
 *
 * Worker log lines (one file per worker process, w<idx>-<pid>.log,
 * appended with one write each, so kill -9 loses no line already written):
 *   W res t              started waiting for res (also: a count change
 *                        of a latch begins)
 *   F res rc t           the acquire failed (rc), waiting ended
 *   A res token t until  acquired at t; the hold is its own until `until`
 *                        (its local deadline; sem: 0, no lease). Expirable
 *                        permits: token = the lease of a one-attempt
 *                        acquire (try_acquire), else 0; until = the wait's
 *                        start + the lease - margin
 *   V res until          the local deadline seen later (renewals)
 *   S res token ok t     a write to the fenced store: ok 1 accepted, 0 not
 *   R res t              the unlock is about to be called (a process killed
 *                        after this line may have released: checker.c)
 *   U res rc t0 t1       unlock (sem: post; permits: release) called at t0,
 *                        returned rc at t1
 *   P res rc t0 t1       the unlock of an earlier hold whose unlock
 *                        answered DLOCK_ECONN, called again (the library's
 *                        "the caller's next unlock is the same unlock")
 *   C res rc t0 t1       a latch count-down called at t0, returned rc
 *   L name t             on_lock_lost for the lock `name` (its Redis name)
 *   H call ms            the worker's watchdog: `call` has not returned
 *                        for ms (a hang); the process then exits
 *   M rss_kb fds         a sample of the process's memory and fds
 *   E fds0 fds1 rss0 rss1 hooks  a clean end: fds before the client /
 *                        after it was freed; rss at the first and last
 *                        sample; log-hook calls (each called back into
 *                        the library: dlock_client_stats/dlock_async_stats)
 *   K async              (first line) this worker drives the event-loop
 *                        client; without it, the blocking client
 * Fault log (faults.log): "kind t0 t1 detail" (soak.c, wire.h); also
 * "sem-repair t t n": soak.c posted n permits that calls of unknown outcome
 * had taken for good (a plain semaphore has no lease), once every outcome
 * was settled -- a count change the checker adds to the posts.
 * Counts (counts.log, written by soak.c after the workers stopped and
 * every late copy landed): "res value" (sem0: permits available, latch0:
 * the count, perm0: available and taken).
 */
#ifndef DLOCK_SOAK_H
#define DLOCK_SOAK_H

#include <stdint.h>

#define SOAK_MAX_WORKERS 32
#define SOAK_LEASE_MS 2000           /* watchdog lease */
#define SOAK_SHORT_LEASE_MS 1000     /* a fixed lease shorter than a pause */
#define SOAK_LONG_LEASE_MS 10000     /* a fixed lease longer than a pause */
#define SOAK_WAIT_MS 3000            /* a wait's budget */
#define SOAK_LONG_WAIT_MS 12000      /* ... a long one (storms) */
#define SOAK_CMD_TIMEOUT_MS 500      /* the workers' command_timeout_ms */
#define SOAK_CONNECT_TIMEOUT_MS 3000 /* ... connect_timeout_ms */
#define SOAK_SEM_PERMITS 2
#define SOAK_PERMITS 2           /* expirable permits: the total */
#define SOAK_LATCH_N 100000000LL /* the latch's count: never reached */
#define SOAK_TRY_LEASE_MS 300    /* a one-attempt permit's lease: 300-450 */
#define SOAK_PERMIT_SLACK_MS 150 /* from its W line to its first send */

/* The resources: name, kind, lock name. */
enum {
  K_MUTEX,
  K_FAIR,
  K_FENCED,
  K_RW_READ,
  K_RW_WRITE,
  K_SEM,
  K_LATCH,
  K_PERMIT,
  NKINDS
};
typedef struct soak_res {
  const char *name; /* also the log's res */
  int kind;
  const char *lock; /* the lock's name in Redis */
} soak_res;
extern const soak_res soak_resources[];
extern const int soak_nresources;
extern const char *const soak_kind_names[NKINDS];

/* Topologies (--topology). standalone: one redis-server (appendfsync
 * always), every kind, a wire adversary per worker. sentinel: 1 master +
 * SOAK_SENTINEL_REPLICAS replicas + 3 sentinels, a wire adversary per data
 * node (replica-announce-port); cluster: 3 masters, no replicas
 * (appendfsync always, restarted from their AOF), a wire adversary per
 * master (cluster-announce-port). The counting kinds (semaphore, latch,
 * expirable permits) are left out of sentinel: their counts are not
 * covered by replica sync (docs/guarantees.md), so a failover may give a
 * permit twice -- a documented limit, not a bug. */
/* etcd: a 3-member etcd cluster (fsync on, each member restarted from
 * its data dir after a kill -9), the workers on etcd://ep1,ep2,ep3, the
 * kinds etcd offers only (mutex, fair, fenced, expirable permits; the rest
 * answer DLOCK_ENOTSUP there: docs/etcd.md), every worker on the blocking
 * client (the event-loop client is not offered on etcd), no wire
 * adversary (a Redis-protocol proxy; etcd speaks HTTP); the fenced store
 * stays a redis-server of its own. Fixed leases on etcd are whole seconds
 * of at least 2 s, so the leases below that are shorter become 2 s there
 * (soak_short_lease_ms, soak_try_lease_ms). */
enum { SOAK_STANDALONE, SOAK_SENTINEL, SOAK_CLUSTER, SOAK_ETCD };
/* etcd's shortest fixed lease (whole seconds, >= 2 s: docs/etcd.md) */
#define SOAK_ETCD_MIN_LEASE_MS 2000
/* etcd's election timeout (its default, which the members run with): a
 * leader lost is replaced after about this, a paused leader too */
#define SOAK_ETCD_ELECTION_MS 1000
/* etcd's lessor looks for expired leases every 500 ms and revokes them by
 * a proposal: how long past its TTL a lease may still stand */
#define SOAK_ETCD_REVOKE_MS 1000
/* The workers' command_timeout_ms on etcd: one fsynced write on a loaded
 * machine, a member's answer within an election timeout */
#define SOAK_ETCD_CMD_TIMEOUT_MS SOAK_ETCD_ELECTION_MS
/* The fixed lease shorter than a pause (SOAK_SHORT_LEASE_MS; on etcd its
 * shortest), a one-attempt permit's lease (SOAK_TRY_LEASE_MS + 0-150 ms;
 * on etcd 2 or 3 s), the workers' command timeout, and how long a holder
 * is paused to outlive its lease (the watchdog's or the short one) on the
 * server. */
long long soak_short_lease_ms(int topology);
long long soak_try_lease_ms(int topology);
int soak_cmd_timeout_ms(int topology);
long long soak_pause_ms(int topology);
/* sync_replicas of the sentinel workers: every replica, so that every
 * acquisition reported held is on the replica that gets promoted (with
 * fewer, Sentinel may promote one that missed it: docs/sentinel.md). */
#define SOAK_SENTINEL_REPLICAS 2
/* Whether resource i is used on topology t. */
int soak_res_in(int i, int t);
/* The resource with Redis lock name `lock` (the first: both rwlock sides
 * share one), or -1. */
int soak_res_of_lock(const char *lock);

/* Shared with the workers through a file mapped in every process. */
enum {
  PH_IDLE,
  PH_WAIT,      /* in an acquire call */
  PH_HOLD,      /* holding */
  PH_PRE_WRITE, /* holding a fenced lock, before the store write */
  PH_SEM,       /* holding a plain semaphore permit (never killed) */
  PH_UNLOCK     /* inside the unlock call of a mutex kind */
};
typedef struct soak_shared {
  volatile int stop;
  volatile int phase[SOAK_MAX_WORKERS];
  volatile int res[SOAK_MAX_WORKERS];            /* of the phase */
  volatile long long lease[SOAK_MAX_WORKERS];    /* ms; -1 watchdog */
  volatile long long since[SOAK_MAX_WORKERS];    /* the phase began (us) */
  volatile long long wait_end[SOAK_MAX_WORKERS]; /* budget ends (us) */
  volatile int pid[SOAK_MAX_WORKERS];
  /* the holder field of the hold (mutex kinds): "<client id>:<tid>" */
  char field[SOAK_MAX_WORKERS][64];
  /* Set by soak.c: workers crowd on resource storm - 1 (0: none), with
   * mixed leases and long waits; long_holds: sections hold 2-4 s. */
  volatile int storm;
  volatile int long_holds;
  /* Set by soak.c while it gives the semaphore back the permits that
   * acquisitions of unknown outcome took for good: no sem section starts. */
  volatile int sem_frozen;
  /* Directed sections (soak.c's pause-waiter "timeout" shape): no worker
   * picks resource shun - 1 on its own; an order makes worker w's next
   * section one on order_res[w] - 1 with that lease and wait, held until
   * release[w] is set (at most 5 s). */
  volatile int shun;
  volatile int order_res[SOAK_MAX_WORKERS];
  volatile long long order_lease[SOAK_MAX_WORKERS];
  volatile long long order_wait[SOAK_MAX_WORKERS];
  volatile int release[SOAK_MAX_WORKERS];
  /* order_gate[w]: the ordered section starts only once go[w] is set
   * (bounded: 10 s) */
  volatile int order_gate[SOAK_MAX_WORKERS];
  volatile int go[SOAK_MAX_WORKERS];
} soak_shared;

int64_t soak_now_us(void);
soak_shared *soak_map(const char *path, int create);

/* worker.c: runs worker idx until shared->stop; exit status 0. async:
 * the event-loop client (plain mutex resources only), else the blocking
 * client (every resource of the topology). */
int soak_worker(int idx, const char *url, const char *direct_url,
                const char *dir, int topology, int async, soak_shared *sh);
/* The longest a library call of a worker may take before the worker's
 * watchdog calls it a hang (ms): the retry policy's window at the
 * workers' settings plus the longest wait, twice over. */
int64_t soak_hang_ms(int topology);

/* etcd.c (the etcd topology): starts the 3 members under dir, ready with
 * a leader, and writes the workers' URL (etcd://ep1,ep2,ep3); 0 or -1. */
int soak_etcd_setup(const char *dir, char *url, size_t cap);
/* The faults: the member hit (its index), -1 not applied, -2 the cluster
 * did not heal (bounded waits: fatal). d gets the faults.log detail. */
int soak_etcd_leader_kill(char *d, size_t dn);
int soak_etcd_member_stop(char *d, size_t dn);
/* Whether a key of lock holds field as its value (a hold of that
 * client and thread): 1, 0, or -1 (no member answered). */
int soak_etcd_has_field(const char *lock, const char *field);
/* What the run must know of the installed etcd's limits (a line for the
 * banner), or NULL. */
const char *soak_etcd_note(void);
/* Kills the members; remove: their directories too. */
void soak_etcd_stop(int remove);

/* checker.c: reads dir's logs, faults.log and counts.log and the stores
 * on redis at direct_url (NULL: logs only), prints the summary; returns
 * the number of problems (0 = pass). paused_in_cs: targeted pauses of
 * fenced holders past their lease (from two on, the Kleppmann scenario
 * must be caught without fencing). */
int soak_check(const char *dir, const char *direct_url, int paused_in_cs);

/* soak.c: every fault class by its faults.log name (the schedule's, then
 * the wire adversary's), and how many. */
extern const char *const soak_fault_classes[];
extern const int soak_n_fault_classes;

#endif
