/*
 * soak.h -- `make soak` (issue 17): worker processes take every lock kind
 * on a private redis-server (appendfsync always) under a random fault
 * schedule, logging each critical section; a checker reads the logs and
 * the stores afterwards. soak.c runs the schedule, worker.c is one worker
 * process, checker.c judges.
 *
 * Times are CLOCK_MONOTONIC microseconds, one clock for every process on
 * the machine, so intervals of different workers compare directly.
 *
 * Worker log lines (one file per worker process, appended with one write
 * each, so kill -9 loses no line already written):
 *   W res t              started waiting for res
 *   F res rc t           the acquire failed (rc), waiting ended
 *   A res token t until  acquired at t; the hold is its own until `until`
 *                        (its local deadline; sem: 0, no lease)
 *   V res until          the local deadline seen later (renewals)
 *   S res token ok t     a write to the fenced store: ok 1 accepted, 0 not
 *   R res t              the unlock is about to be called (a process killed
 *                        after this line may have released: checker.c)
 *   U res rc t           unlock called at t, returned rc
 *   L res t              on_lock_lost for res
 *   M rss_kb fds         a sample of the process's memory and fds
 *   E fds0 fds1 rss0 rss1  a clean end: fds before the client / after it
 *                        was freed; rss at the first and last sample
 *   K async              (first line) this worker drives the event-loop
 *                        client; without it, the blocking client
 * Fault log (faults.log): "kind t0 t1 detail".
 */
#ifndef DLOCK_SOAK_H
#define DLOCK_SOAK_H

#include <stdint.h>

#define SOAK_MAX_WORKERS 32
#define SOAK_LEASE_MS 2000 /* watchdog lease (and the rwlock's fixed one) */
#define SOAK_SEM_PERMITS 2

/* The resources: name, kind, capacity. */
enum { K_MUTEX, K_FAIR, K_FENCED, K_RW_READ, K_RW_WRITE, K_SEM };
typedef struct soak_res {
  const char *name; /* also the log's res */
  int kind;
  const char *lock; /* the lock's name in Redis */
} soak_res;
extern const soak_res soak_resources[];
extern const int soak_nresources;

/* Topologies (--topology). standalone: one redis-server (appendfsync
 * always), every kind. sentinel: 1 master + SOAK_SENTINEL_REPLICAS
 * replicas + 3 sentinels; cluster: 3 masters, no replicas (appendfsync
 * always, restarted from their AOF). The semaphore is left out of both:
 * its counts are not covered by replica sync (docs/guarantees.md), so a
 * failover may give a permit twice -- a documented limit, not a bug. */
enum { SOAK_STANDALONE, SOAK_SENTINEL, SOAK_CLUSTER };
/* sync_replicas of the sentinel workers: every replica, so that every
 * acquisition reported held is on the replica that gets promoted (with
 * fewer, Sentinel may promote one that missed it: docs/sentinel.md). */
#define SOAK_SENTINEL_REPLICAS 2
/* Whether resource i is used on topology t. */
int soak_res_in(int i, int t);

/* Shared with the workers through a file mapped in every process. */
enum { PH_IDLE, PH_WAIT, PH_HOLD, PH_PRE_WRITE, PH_SEM };
typedef struct soak_shared {
  volatile int stop;
  volatile int phase[SOAK_MAX_WORKERS];
} soak_shared;

int64_t soak_now_us(void);
soak_shared *soak_map(const char *path, int create);

/* worker.c: runs worker idx until shared->stop; exit status 0. async:
 * the event-loop client (plain mutex resources only), else the blocking
 * client (every resource of the topology). */
int soak_worker(int idx, const char *url, const char *direct_url,
                const char *dir, int topology, int async, soak_shared *sh);

/* checker.c: reads dir's logs and the stores on redis at direct_url
 * (NULL: logs only),
 * prints the summary; returns the number of problems (0 = pass).
 * paused_in_cs: targeted pauses of fenced holders (the Kleppmann
 * scenario must then be caught without fencing). */
int soak_check(const char *dir, const char *direct_url, int paused_in_cs);

#endif
