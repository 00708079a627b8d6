/*
 * worker.c -- one soak worker process: a client through the wire
 * adversary (soak.c: a proxy per worker or per data node; on etcd a
 * client of the members themselves, on the kinds etcd offers, with the
 * leases and timeouts of soak.h's etcd rules), every kind, one
 * critical section (or count change) after another until told to stop;
 * fenced holders write their token to a fenced store and to a plain
 * register (no check: the Kleppmann scenario shows there). An async worker
 * (soak_worker's `async`) drives the event-loop client (dlock/async.h) on
 * a private poll(2) loop instead, on the plain mutex resources only (the
 * one kind with an async form); its holds go to the same logs and the
 * same checker.
 *
 * What a worker does is shaped to meet the round-4 defects (issues 38,
 * 43) as a user would: leases mixed (the watchdog, a fixed lease shorter
 * than a pause, one longer than any pause); a call that was re-sent (the
 * client's retry counter moved) or slow is followed at once by another on
 * the same resource -- the same thread locks again, with a longer lease,
 * and holds 1.5-3 s (a late copy of the first call then lands on the new
 * hold); an unlock that answered DLOCK_ECONN is retried as the library
 * says ("the caller's next unlock is the same unlock"), half the time
 * after locking again first. soak.c's storms make every worker crowd on
 * one resource with long waits (queues to pause a waiter in). The log
 * hook of every client calls back into the library (dlock_client_stats,
 * dlock_async_stats), and a watchdog thread reports a call that does not
 * return (an H line: a hang).
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "dlock/async.h"
#include "soak.h"

static int g_log = -1;
static int g_trace = -1; /* SOAK_TRACE set: the library's events, w*.trace */
static int g_idx, g_topo;
static soak_shared *g_sh;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n > 0 && write(g_log, b, (size_t)n) != n)
    _exit(3);
}

static void on_lost(const char *name, void *arg) {
  (void)arg;
  logf_("L %s %lld\n", name, (long long)soak_now_us());
}

/* ---- the watchdog: a library call that does not return is a hang ------ */

static _Atomic int64_t g_call_t0; /* 0: no call */
static const char *_Atomic g_call_name;
static int64_t g_hang_us;

long long soak_short_lease_ms(int topology) {
  return topology == SOAK_ETCD ? SOAK_ETCD_MIN_LEASE_MS : SOAK_SHORT_LEASE_MS;
}

long long soak_try_lease_ms(int topology) {
  return topology == SOAK_ETCD ? SOAK_ETCD_MIN_LEASE_MS : SOAK_TRY_LEASE_MS;
}

int soak_cmd_timeout_ms(int topology) {
  return topology == SOAK_ETCD ? SOAK_ETCD_CMD_TIMEOUT_MS : SOAK_CMD_TIMEOUT_MS;
}

/* Past the lease (the watchdog's, the short one) on the server: Redis
 * expires a key at its TTL; etcd's lessor revokes an expired lease up to
 * SOAK_ETCD_REVOKE_MS later, and then another waiter must get in. */
long long soak_pause_ms(int topology) {
  long long lease = SOAK_LEASE_MS > soak_short_lease_ms(topology)
                        ? SOAK_LEASE_MS
                        : soak_short_lease_ms(topology);
  return lease + 1000 + (topology == SOAK_ETCD ? SOAK_ETCD_REVOKE_MS : 0);
}

int64_t soak_hang_ms(int topology) {
  if (topology == SOAK_ETCD) {
    /* etcd_http.c: one copy of a request is cut at command_timeout_ms
     * (libcurl's CURLOPT_TIMEOUT_MS, the connect included); a round tries
     * each of the 3 members once, then the retry policy's pause; 1 +
     * retry_attempts rounds (the workers': 2, 100 ms) */
    int64_t round = 3LL * SOAK_ETCD_CMD_TIMEOUT_MS;
    int64_t window = round * 3 + 2 * 100;
    return 2 * (window + SOAK_LONG_WAIT_MS);
  }
  int64_t send = SOAK_CONNECT_TIMEOUT_MS + 2 * SOAK_CMD_TIMEOUT_MS +
                 (topology == SOAK_SENTINEL ? 1000 : 0);
  int64_t window = (send + 100) * 3 + send; /* docs/errors.md, once TTL */
  return 2 * (window + SOAK_LONG_WAIT_MS);
}

static void call_begin(const char *name) {
  atomic_store(&g_call_name, name);
  atomic_store(&g_call_t0, soak_now_us());
}
static int call_end(int rc) {
  atomic_store(&g_call_t0, 0);
  return rc;
}
/* rc of expr, with the watchdog looking. */
#define WATCHED(name, expr) (call_begin(name), call_end(expr))

static char g_stack_path[600];

/* Every thread's stack into w<idx>-<pid>.stack (gdb, bounded), so that a
 * hang says where it is. */
static void dump_stacks(void) {
  char cmd[800];
  snprintf(cmd, sizeof cmd,
           "timeout 60 gdb -p %d -batch -nx -ex 'thread apply all bt' "
           ">%s 2>&1 </dev/null",
           (int)getpid(), g_stack_path);
  if (system(cmd) != 0)
    logf_("X no stacks (gdb)\n");
}

static void *hang_main(void *arg) {
  (void)arg;
  for (;;) {
    usleep(250000);
    int64_t t0 = atomic_load(&g_call_t0), now = soak_now_us();
    if (t0 > 0 && now - t0 > g_hang_us) {
      logf_("H %s %lld\n", atomic_load(&g_call_name),
            (long long)((now - t0) / 1000));
      dump_stacks();
      _exit(6);
    }
  }
  return NULL;
}

/* ---- the shared phase (soak.c picks its victims by it) ----------------- */

static void phase(int ph, int res, long long lease, long long wait_ms) {
  int64_t now = soak_now_us();
  g_sh->res[g_idx] = res;
  g_sh->lease[g_idx] = lease;
  g_sh->since[g_idx] = now;
  if (ph == PH_WAIT)
    g_sh->wait_end[g_idx] = now + wait_ms * 1000;
  g_sh->phase[g_idx] = ph;
}

static void set_field(const char *f) {
  snprintf(g_sh->field[g_idx], sizeof g_sh->field[g_idx], "%s", f);
}

/* ---- the log hook: it calls back into the library, on every client ----- */

static _Atomic(dlock_client *) g_client;
static dlock_async *_Atomic g_async;
static atomic_long g_hooks;

static void hook(void *arg, int level, const char *name, const char *event,
                 const char *msg) {
  (void)arg, (void)level, (void)name, (void)event, (void)msg;
  if (g_trace >= 0) { /* one write per line: lines of threads never mix */
    char b[700];
    int n =
        snprintf(b, sizeof b, "%lld %d %s %s %s\n", (long long)soak_now_us(),
                 level, name ? name : "-", event ? event : "-", msg ? msg : "");
    if (n > 0)
      (void)!write(g_trace, b, (size_t)n < sizeof b ? (size_t)n : sizeof b);
  }
  dlock_client_stats st;
  dlock_async *a = atomic_load(&g_async);
  dlock_client *c = atomic_load(&g_client);
  if (a) /* the event-loop client calls its hook on the loop's thread */
    (void)dlock_async_stats(a, &st);
  else if (c)
    (void)dlock_client_stats(c, &st);
  atomic_fetch_add(&g_hooks, 1);
}

static uint64_t retries(void) {
  dlock_client_stats st;
  dlock_client *c = atomic_load(&g_client);
  return c && dlock_client_stats(c, &st) == 0 ? st.retries : 0;
}

/* ---- process samples ------------------------------------------------ */

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n - 1; /* the DIR's own */
}

/* What the fds left open after the client was freed point to ("D fd
 * target" lines: the checker reports the leak, these say what it is). */
static void log_fds(int fds0) {
  if (count_fds() <= fds0)
    return;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[300], t[256];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t n = e->d_name[0] == '.' ? -1 : readlink(p, t, sizeof t - 1);
    if (n > 0) {
      t[n] = '\0';
      logf_("D %s %s\n", e->d_name, t);
    }
  }
  if (d)
    closedir(d);
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static const char *g_store_lua =
    "local max = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if tonumber(ARGV[1]) < max then return 0 end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call('rpush', KEYS[2], ARGV[1])\n"
    "return 1\n";

/* The resource the fenced holder writes to: the fenced store (rejects a
 * token below the highest seen) and the plain register (accepts all). */
static void store_write(redisContext **rc, const char *direct, const char *res,
                        unsigned long long tok) {
  if (!*rc || (*rc)->err) {
    if (*rc)
      redisFree(*rc);
    struct timeval tv = {1, 0};
    *rc = redisConnectUnixWithTimeout(direct + strlen("unix://"), tv);
    if (*rc)
      redisSetTimeout(*rc, tv);
  }
  redisReply *x =
      redisCommand(*rc, "EVAL %s 2 fstore:max:%s fstore:log:%s %llu",
                   g_store_lua, res, res, tok);
  int ok = x && x->type == REDIS_REPLY_INTEGER ? (int)x->integer : -1;
  if (x)
    freeReplyObject(x);
  x = redisCommand(*rc, "RPUSH plain:log:%s %llu", res, tok);
  if (x)
    freeReplyObject(x);
  logf_("S %s %llu %d %lld\n", res, tok, ok, (long long)soak_now_us());
}

/* ---- what the next section does ---------------------------------------- */

typedef struct plan {
  int res;
  long long lease; /* ms; -1 the watchdog */
  long long wait;  /* ms */
  int64_t hold_us;
  int relock;  /* a re-lock after an unlock that answered DLOCK_ECONN */
  int ordered; /* soak.c's order: held until released */
} plan;

static int g_follow = -1; /* the resource the next section must use */

static int lock_kind(int k) { return k <= K_RW_WRITE; }

/* After a call that was re-sent or slow: the same resource again, at once
 * (the late copy of that call is still on its way). */
static void follow(int res, int resent, int64_t elapsed_us) {
  if (resent || elapsed_us > soak_cmd_timeout_ms(g_topo) * 1000LL)
    g_follow = res;
}

static plan next_plan(int async, const int *pool, int npool) {
  plan p = {-1, -1, SOAK_WAIT_MS, 5000 + rand() % 35000, 0, 0};
  if (npool <= 0) /* every worker has resources: never */
    return p;
  int storm = g_sh->storm - 1, in_pool = 0;
  if (g_sh->order_res[g_idx] > 0) {
    p.res = g_sh->order_res[g_idx] - 1;
    p.lease = g_sh->order_lease[g_idx];
    p.wait = g_sh->order_wait[g_idx];
    p.ordered = 1;
    p.hold_us = 0; /* held until released, no longer */
    g_sh->order_res[g_idx] = 0;
    for (int k = 0; g_sh->order_gate[g_idx] && !g_sh->go[g_idx] && k < 200000;
         k++)
      usleep(100); /* started by soak.c at the moment it wants */
    g_sh->order_gate[g_idx] = g_sh->go[g_idx] = 0;
    return p;
  }
  for (int i = 0; i < npool; i++)
    in_pool |= pool[i] == storm;
  if (g_follow >= 0) {
    p.res = g_follow;
    g_follow = -1;
    if (lock_kind(soak_resources[p.res].kind)) {
      p.lease = SOAK_LONG_LEASE_MS;
      p.hold_us = 1500000 + rand() % 1500000;
    }
    return p;
  }
  if (storm >= 0 && in_pool && storm != g_sh->shun - 1 && rand() % 5 != 0) {
    int r = rand() % 3;
    p.res = storm;
    p.lease = r == 0   ? soak_short_lease_ms(g_topo)
              : r == 1 ? -1
                       : SOAK_LONG_LEASE_MS;
    p.wait = rand() % 2 ? SOAK_WAIT_MS : SOAK_LONG_WAIT_MS;
    return p;
  }
  do
    p.res = pool[rand() % npool];
  while (p.res == g_sh->shun - 1 && npool > 1);
  int r = rand() % 20;
  p.lease = r < 12   ? -1
            : r < 17 ? soak_short_lease_ms(g_topo)
                     : SOAK_LONG_LEASE_MS;
  if (g_sh->long_holds && lock_kind(soak_resources[p.res].kind)) {
    p.lease = -1; /* renewed meanwhile: what a blackholed node may stall */
    p.hold_us = 2000000 + rand() % 2000000;
  }
  (void)async;
  return p;
}

/* ---- the blocking client's sections ----------------------------------- */

typedef struct objs {
  dlock_mutex *m[16];
  dlock_rwlock *rw;
  dlock_sem *sem;
  dlock_latch *latch;
  dlock_permits *perm;
  redisContext *store;
  const char *direct;
} objs;

/* The hold's local deadline (us) from the object's validity; 0 none. */
static int64_t deadline(objs *o, const soak_res *r, int64_t now) {
  long long v = 0;
  int rc = r->kind == K_RW_READ || r->kind == K_RW_WRITE
               ? dlock_rwlock_validity(o->rw, &v)
               : dlock_mutex_validity(o->m[r - soak_resources], &v);
  return rc == 0 && v > 0 ? now + v * 1000 : 0;
}

static int lock_call(objs *o, const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  if (r->kind == K_RW_READ)
    return WATCHED("rwlock_timedrdlock",
                   dlock_rwlock_timedrdlock(o->rw, p->wait, p->lease));
  if (r->kind == K_RW_WRITE)
    return WATCHED("rwlock_timedwrlock",
                   dlock_rwlock_timedwrlock(o->rw, p->wait, p->lease));
  return WATCHED("mutex_timedlock",
                 dlock_mutex_timedlock(o->m[p->res], p->wait, p->lease));
}

static int unlock_call(objs *o, int res) {
  int k = soak_resources[res].kind;
  return k == K_RW_READ || k == K_RW_WRITE
             ? WATCHED("rwlock_unlock", dlock_rwlock_unlock(o->rw))
             : WATCHED("mutex_unlock", dlock_mutex_unlock(o->m[res]));
}

static void lock_section(objs *o, const plan *p);

/* An unlock that answered DLOCK_ECONN: its outcome is unknown and the
 * hold stays recorded. Half the time the thread locks again first (the
 * shape of issue 38 item 2); then the same unlock is called again until it
 * answers (bounded). */
static void pending_unlock(objs *o, const plan *p) {
  if (!p->relock && rand() % 2) {
    plan q = {
        p->res, SOAK_LONG_LEASE_MS, SOAK_WAIT_MS, 1500000 + rand() % 1500000, 1,
        0};
    lock_section(o, &q);
  }
  for (int k = 0; k < 10; k++) {
    int64_t t0 = soak_now_us();
    int rc = unlock_call(o, p->res);
    logf_("P %s %d %lld %lld\n", soak_resources[p->res].name, rc, (long long)t0,
          (long long)soak_now_us());
    if (rc != DLOCK_ECONN)
      break;
    usleep(300000);
  }
}

/* One critical section of a mutex kind or a read-write lock side. */
static void lock_section(objs *o, const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  int64_t t0 = soak_now_us();
  phase(PH_WAIT, p->res, p->lease, p->wait);
  logf_("W %s %lld\n", r->name, (long long)t0);
  uint64_t r0 = retries();
  int rc = lock_call(o, p);
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    phase(PH_IDLE, -1, 0, 0);
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    usleep(10000);
    return;
  }
  if (!p->relock)
    follow(p->res, retries() > r0, 0);
  uint64_t tok = 0;
  char owner[64] = "";
  if (r->kind <= K_FENCED)
    (void)dlock_mutex_owner(o->m[p->res], owner, sizeof owner);
  set_field(owner);
  phase(r->kind == K_FENCED ? PH_PRE_WRITE : PH_HOLD, p->res, p->lease, 0);
  if (r->kind == K_FENCED)
    (void)dlock_mutex_token(o->m[p->res], &tok);
  int64_t until = deadline(o, r, t);
  logf_("A %s %llu %lld %lld\n", r->name, (unsigned long long)tok, (long long)t,
        (long long)(until ? until : t));
  usleep((useconds_t)p->hold_us);
  for (int k = 0; p->ordered && !g_sh->release[g_idx] && k < 40000; k++)
    usleep(200); /* held until soak.c releases it (within its lease) */
  g_sh->release[g_idx] = 0;
  if (r->kind == K_FENCED) {
    store_write(&o->store, o->direct, r->name, tok); /* no validity check */
    phase(PH_HOLD, p->res, p->lease, 0);
  }
  logf_("V %s %lld\n", r->name, (long long)deadline(o, r, soak_now_us()));
  int64_t tu = soak_now_us();
  if (r->kind <= K_FENCED)
    phase(PH_UNLOCK, p->res, p->lease, 0);
  logf_("R %s %lld\n", r->name, (long long)tu); /* the unlock begins */
  r0 = retries();
  rc = unlock_call(o, p->res);
  int64_t tu1 = soak_now_us();
  phase(PH_IDLE, -1, 0, 0);
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu, (long long)tu1);
  if (rc == DLOCK_ECONN)
    pending_unlock(o, p);
  else if (!p->relock)
    follow(p->res, retries() > r0, tu1 - tu);
}

/* A plain semaphore permit: taken, held, posted. */
static void sem_section(objs *o, const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  int64_t t0 = soak_now_us();
  phase(PH_WAIT, p->res, 0, p->wait);
  logf_("W %s %lld\n", r->name, (long long)t0);
  uint64_t r0 = retries();
  int rc = WATCHED("sem_timedwait", dlock_sem_timedwait(o->sem, p->wait));
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    phase(PH_IDLE, -1, 0, 0);
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    usleep(10000);
    return;
  }
  follow(p->res, retries() > r0, 0);
  phase(PH_SEM, p->res, 0, 0);
  logf_("A %s 0 %lld 0\n", r->name, (long long)t);
  usleep((useconds_t)p->hold_us);
  int64_t tu = soak_now_us();
  logf_("R %s %lld\n", r->name, (long long)tu);
  r0 = retries();
  rc = WATCHED("sem_post", dlock_sem_post(o->sem));
  int64_t tu1 = soak_now_us();
  phase(PH_IDLE, -1, 0, 0);
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu, (long long)tu1);
  follow(p->res, retries() > r0, tu1 - tu);
}

/* A count-down of the latch (its count never reaches zero: SOAK_LATCH_N),
 * judged by the final count (checker.c). */
static void latch_section(objs *o, const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  int64_t t0 = soak_now_us();
  phase(PH_WAIT, p->res, 0, 0);
  logf_("W %s %lld\n", r->name, (long long)t0);
  uint64_t r0 = retries();
  int rc = WATCHED("latch_count_down", dlock_latch_count_down(o->latch));
  int64_t t1 = soak_now_us();
  phase(PH_IDLE, -1, 0, 0);
  logf_("C %s %d %lld %lld\n", r->name, rc, (long long)t0, (long long)t1);
  follow(p->res, retries() > r0, t1 - t0);
  usleep((useconds_t)p->hold_us);
}

/* X <res> <1|0>: whether the server still has the permit `id` just
 * returned (its key under its lease: etcd deletes a lease's keys when it
 * expires). On etcd the acquisition grants its lease after the session is
 * had, so its first send can trail the W line by an election; the checker
 * judges a late return by this instead of by the W line. (The lease's TTL
 * is whole seconds, rounded down: "0 s left" cannot tell a live permit's
 * last second from a dead one, so presence is the test.) */
static void log_server_life(objs *o, const char *res, const char *id) {
  dlock_permit *ls = NULL;
  size_t n = 0;
  long long avail = 0;
  int found = 0;
  if (dlock_permits_list(o->perm, &ls, &n, &avail) < 0)
    return; /* no read: the W-based judgment stands (>= 0: how many) */
  for (size_t i = 0; i < n; i++)
    found |= strcmp(ls[i].id, id) == 0;
  dlock_permits_list_free(ls);
  logf_("X %s %d\n", res, found);
}

/* An expirable permit: half one attempt with a lease of 300-450 ms (the
 * shape of issue 38 item 5; on etcd 2 or 3 s, whole seconds), half a wait
 * with a 5 s lease or the watchdog's. */
static void permit_section(objs *o, const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  int one = rand() % 2;
  long long tl = soak_try_lease_ms(g_topo);
  long long lease =
      one ? tl + (g_topo == SOAK_ETCD ? 1000 * (rand() % 2) : rand() % 151)
          : (rand() % 2 ? 5000 : -1);
  int64_t t0 = soak_now_us();
  phase(PH_WAIT, p->res, lease, one ? 0 : p->wait);
  logf_("W %s %lld\n", r->name, (long long)t0);
  char id[DLOCK_PERMIT_ID_LEN + 1];
  uint64_t r0 = retries();
  int rc = one ? WATCHED("permits_try_acquire",
                         dlock_permits_try_acquire(o->perm, lease, id))
               : WATCHED("permits_acquire",
                         dlock_permits_acquire(o->perm, p->wait, lease, id));
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    phase(PH_IDLE, -1, 0, 0);
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    usleep(10000);
    return;
  }
  follow(p->res, retries() > r0, 0);
  long long l = lease > 0 ? lease : SOAK_LEASE_MS;
  phase(PH_HOLD, p->res, lease, 0);
  logf_("A %s %lld %lld %lld\n", r->name, one ? lease : 0LL, (long long)t,
        (long long)(t0 + (l - l / 100 - 2) * 1000));
  if (g_topo == SOAK_ETCD && one)
    log_server_life(o, r->name, id);
  usleep((useconds_t)(one ? 5000 + rand() % 35000 : p->hold_us));
  int64_t tu = soak_now_us();
  logf_("R %s %lld\n", r->name, (long long)tu);
  r0 = retries();
  rc = WATCHED("permits_release", dlock_permits_release(o->perm, id));
  int64_t tu1 = soak_now_us();
  phase(PH_IDLE, -1, 0, 0);
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu, (long long)tu1);
  for (int k = 0; rc == DLOCK_ECONN && k < 5; k++) { /* by id: harmless */
    usleep(300000);
    int64_t a = soak_now_us();
    rc = WATCHED("permits_release", dlock_permits_release(o->perm, id));
    logf_("P %s %d %lld %lld\n", r->name, rc, (long long)a,
          (long long)soak_now_us());
  }
  follow(p->res, retries() > r0, tu1 - tu);
}

static int make_objs(dlock_client *c, objs *o) {
  for (int i = 0; i < soak_nresources && i < 16; i++) {
    const soak_res *r = &soak_resources[i];
    int rc = 0;
    if (!soak_res_in(i, g_topo)) /* etcd: DLOCK_ENOTSUP */
      continue;
    if (r->kind == K_MUTEX)
      rc = dlock_mutex_new(c, r->lock, &o->m[i]);
    else if (r->kind == K_FAIR)
      rc = dlock_mutex_new_fair(c, r->lock, &o->m[i]);
    else if (r->kind == K_FENCED)
      rc = dlock_mutex_new_fenced(c, r->lock, &o->m[i]);
    else if (r->kind == K_SEM && !o->sem)
      rc = dlock_sem_new(c, r->lock, &o->sem);
    else if (r->kind == K_LATCH && !o->latch)
      rc = dlock_latch_new(c, r->lock, &o->latch);
    else if (r->kind == K_PERMIT && !o->perm)
      rc = dlock_permits_new(c, r->lock, &o->perm);
    else if (!o->rw && (r->kind == K_RW_READ || r->kind == K_RW_WRITE))
      rc = dlock_rwlock_new(c, r->lock, &o->rw);
    if (rc)
      return rc;
  }
  return 0;
}

static void free_objs(objs *o) {
  for (int i = 0; i < 16; i++)
    dlock_mutex_free(o->m[i]);
  dlock_rwlock_free(o->rw);
  dlock_sem_free(o->sem);
  dlock_latch_free(o->latch);
  dlock_permits_free(o->perm);
  if (o->store)
    redisFree(o->store);
}

static void one_section(objs *o, const plan *p) {
  switch (soak_resources[p->res].kind) {
  case K_SEM:
    if (!g_sh->sem_frozen)
      sem_section(o, p);
    break;
  case K_LATCH:
    latch_section(o, p);
    break;
  case K_PERMIT:
    permit_section(o, p);
    break;
  default:
    lock_section(o, p);
  }
}

/* ---- the event-loop client on a private poll(2) loop ------------------- */

#define A_MAX_WATCH 16
static struct {
  dlock_async *a;
  struct {
    dlock_async_watch *w;
    int rd, wr;
  } ws[A_MAX_WATCH];
  int nws;
  int64_t timer_at; /* soak_now_us; -1 none */
} g_loop;

static int find_w(dlock_async_watch *w) {
  for (int i = 0; i < g_loop.nws; i++)
    if (g_loop.ws[i].w == w)
      return i;
  return -1;
}
static int get_w(dlock_async_watch *w) {
  int i = find_w(w);
  if (i >= 0 || g_loop.nws == A_MAX_WATCH)
    return i;
  i = g_loop.nws++;
  g_loop.ws[i].w = w;
  g_loop.ws[i].rd = g_loop.ws[i].wr = 0;
  return i;
}
static int h_add_read(void *d, dlock_async_watch *w) {
  (void)d;
  int i = get_w(w);
  return i < 0 ? -1 : (g_loop.ws[i].rd = 1, 0);
}
static void h_del_read(void *d, dlock_async_watch *w) {
  (void)d;
  int i = find_w(w);
  if (i >= 0)
    g_loop.ws[i].rd = 0;
}
static int h_add_write(void *d, dlock_async_watch *w) {
  (void)d;
  int i = get_w(w);
  return i < 0 ? -1 : (g_loop.ws[i].wr = 1, 0);
}
static void h_del_write(void *d, dlock_async_watch *w) {
  (void)d;
  int i = find_w(w);
  if (i >= 0)
    g_loop.ws[i].wr = 0;
}
static void h_release(void *d, dlock_async_watch *w) {
  (void)d;
  int i = find_w(w);
  if (i >= 0)
    g_loop.ws[i] = g_loop.ws[--g_loop.nws];
}
static void h_schedule(void *d, long long ms) {
  (void)d;
  g_loop.timer_at = soak_now_us() + ms * 1000;
}
static void h_cancel(void *d) {
  (void)d;
  g_loop.timer_at = -1;
}
static void h_cleanup(void *d) { (void)d; }

/* One turn of the loop: poll at most max_us (or until the timer). */
static void turn(int64_t max_us) {
  struct pollfd pf[A_MAX_WATCH];
  dlock_async_watch *who[A_MAX_WATCH];
  int n = 0;
  for (int i = 0; i < g_loop.nws; i++) {
    if (!g_loop.ws[i].rd && !g_loop.ws[i].wr)
      continue;
    pf[n].fd = g_loop.ws[i].w->fd;
    pf[n].events = (short)((g_loop.ws[i].rd ? POLLIN : 0) |
                           (g_loop.ws[i].wr ? POLLOUT : 0));
    pf[n].revents = 0;
    who[n++] = g_loop.ws[i].w;
  }
  int64_t wait = max_us, now = soak_now_us();
  if (g_loop.timer_at >= 0 && g_loop.timer_at - now < wait)
    wait = g_loop.timer_at - now;
  (void)poll(pf, (nfds_t)n, wait > 0 ? (int)((wait + 999) / 1000) : 0);
  for (int i = 0; i < n; i++) {
    int x = find_w(who[i]); /* a callback may have closed a socket */
    short re = pf[i].revents;
    if (x >= 0 && g_loop.ws[x].rd && (re & (POLLIN | POLLERR | POLLHUP)))
      dlock_async_on_readable(who[i]);
    x = find_w(who[i]);
    if (x >= 0 && g_loop.ws[x].wr && (re & (POLLOUT | POLLERR | POLLHUP)))
      dlock_async_on_writable(who[i]);
  }
  if (g_loop.timer_at >= 0 && soak_now_us() >= g_loop.timer_at) {
    g_loop.timer_at = -1;
    dlock_async_on_timer(g_loop.a);
  }
}

typedef struct done {
  int n, rc;
} done;
static void on_done(int rc, void *arg) {
  done *x = arg;
  x->n++;
  x->rc = rc;
}

/* Runs the loop until x's call answered; the watchdog thread reports a
 * call that never does (a hang, hang_main). */
static int await(const char *what, int rc, done *x) {
  if (rc != 0)
    return rc;
  call_begin(what);
  while (x->n == 0)
    turn(5000);
  return call_end(x->rc);
}

/* Lets us pass with the loop turning (renewals run). */
static void pump(int64_t us) {
  int64_t end = soak_now_us() + us;
  while (soak_now_us() < end)
    turn(end - soak_now_us());
}

static int a_lock(const soak_res *r, const plan *p) {
  done x = {0, 0};
  return await(
      "async_lock",
      dlock_async_lock(g_loop.a, r->lock, 1, p->wait, p->lease, on_done, &x),
      &x);
}

static int a_unlock(const soak_res *r) {
  done y = {0, 0};
  return await("async_unlock",
               dlock_async_unlock(g_loop.a, r->lock, 1, on_done, &y), &y);
}

static void async_section(const plan *p);

/* As pending_unlock, on the event-loop client. */
static void async_pending(const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  if (!p->relock && rand() % 2) {
    plan q = {
        p->res, SOAK_LONG_LEASE_MS, SOAK_WAIT_MS, 1500000 + rand() % 1500000, 1,
        0};
    async_section(&q);
  }
  for (int k = 0; k < 10; k++) {
    int64_t t0 = soak_now_us();
    int rc = a_unlock(r);
    logf_("P %s %d %lld %lld\n", r->name, rc, (long long)t0,
          (long long)soak_now_us());
    if (rc != DLOCK_ECONN)
      break;
    pump(300000);
  }
}

/* One critical section of the async worker on a plain mutex resource. The
 * async client has no validity call: `until` in its A line is the first
 * lease counted from the start of the wait (a lower bound of the key's
 * expiry); the hold ends at the earliest of that, its unlock and its loss
 * report (checker.c). */
static void async_section(const plan *p) {
  const soak_res *r = &soak_resources[p->res];
  int64_t t0 = soak_now_us();
  phase(PH_WAIT, p->res, p->lease, p->wait);
  logf_("W %s %lld\n", r->name, (long long)t0);
  int rc = a_lock(r, p);
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    phase(PH_IDLE, -1, 0, 0);
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    pump(10000);
    return;
  }
  /* no retry counter here: a slow acquire (maybe a wait) half the time */
  if (!p->relock && t - t0 > SOAK_CMD_TIMEOUT_MS * 1000LL && rand() % 2)
    g_follow = p->res;
  char owner[64];
  snprintf(owner, sizeof owner, "%s:1", dlock_async_id(g_loop.a));
  set_field(owner);
  phase(PH_HOLD, p->res, p->lease, 0);
  long long lease = p->lease > 0 ? p->lease : SOAK_LEASE_MS;
  lease -= lease / 100 + 2;
  logf_("A %s 0 %lld %lld\n", r->name, (long long)t,
        (long long)t0 + lease * 1000);
  pump(p->hold_us);
  int64_t tu = soak_now_us();
  phase(PH_UNLOCK, p->res, p->lease, 0);
  logf_("R %s %lld\n", r->name, (long long)tu); /* the unlock begins */
  rc = a_unlock(r);
  int64_t tu1 = soak_now_us();
  phase(PH_IDLE, -1, 0, 0);
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu, (long long)tu1);
  if (rc == DLOCK_ECONN)
    async_pending(p);
  else if (!p->relock)
    follow(p->res, 0, tu1 - tu);
}

static int async_worker(soak_shared *sh, dlock_config *cfg, int fds0) {
  static const dlock_async_hooks hooks = {NULL,        h_add_read,  h_del_read,
                                          h_add_write, h_del_write, h_release,
                                          h_schedule,  h_cancel,    h_cleanup};
  g_loop.timer_at = -1;
  if (dlock_async_new(cfg, &g_loop.a) != 0 ||
      dlock_async_attach(g_loop.a, &hooks) != 0) {
    logf_("X %s\n", dlock_last_error());
    return 4;
  }
  atomic_store(&g_async, g_loop.a);
  int mx[8], nmx = 0;
  for (int i = 0; i < soak_nresources && nmx < 8; i++)
    if (soak_resources[i].kind == K_MUTEX)
      mx[nmx++] = i;
  if (nmx == 0) /* the resource table has plain mutexes: never */
    return 4;
  long rss0 = 0, rss1 = 0;
  for (long it = 0; !sh->stop; it++) {
    plan p = next_plan(1, mx, nmx);
    async_section(&p);
    if (it % 100 == 0) {
      rss1 = rss_kb();
      if (it == 300)
        rss0 = rss1;
      logf_("M %ld %d\n", rss1, count_fds());
    }
  }
  atomic_store(&g_async, NULL);
  call_begin("async_free");
  dlock_async_free(g_loop.a);
  call_end(0);
  log_fds(fds0);
  logf_("E %d %d %ld %ld %ld\n", fds0, count_fds(), rss0, rss1,
        atomic_load(&g_hooks));
  return 0;
}

static int blocking_worker(soak_shared *sh, dlock_config *cfg, int fds0,
                           const char *direct) {
  dlock_client *c;
  objs o;
  memset(&o, 0, sizeof o);
  o.direct = direct;
  if (WATCHED("client_new", dlock_client_new(cfg, &c)) != 0 ||
      (atomic_store(&g_client, c), make_objs(c, &o)) != 0) {
    logf_("X %s\n", dlock_last_error()); /* Redis down right now: retry */
    return 4;
  }
  int pool[16], np = 0;
  for (int i = 0; i < soak_nresources && np < 16; i++)
    if (soak_res_in(i, g_topo))
      pool[np++] = i;
  long rss0 = 0, rss1 = 0;
  for (long it = 0; !sh->stop && np > 0; it++) {
    plan p = next_plan(0, pool, np);
    one_section(&o, &p);
    if (it % 100 == 0) {
      rss1 = rss_kb();
      if (it == 300)
        rss0 = rss1;
      logf_("M %ld %d\n", rss1, count_fds());
    }
  }
  free_objs(&o);
  atomic_store(&g_client, NULL);
  call_begin("client_free");
  dlock_client_free(c);
  call_end(0);
  log_fds(fds0);
  logf_("E %d %d %ld %ld %ld\n", fds0, count_fds(), rss0, rss1,
        atomic_load(&g_hooks));
  return 0;
}

int soak_worker(int idx, const char *url, const char *direct, const char *dir,
                int topology, int async, soak_shared *sh) {
  char path[512], name[64];
  snprintf(path, sizeof path, "%s/w%d-%d.log", dir, idx, (int)getpid());
  g_log = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_log < 0)
    return 2;
  if (getenv("SOAK_TRACE")) { /* for a violation's story: docs/hacking.md */
    snprintf(path, sizeof path, "%s/w%d-%d.trace", dir, idx, (int)getpid());
    g_trace = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  g_idx = idx;
  g_topo = topology;
  g_sh = sh;
  sh->pid[idx] = (int)getpid();
  srand((unsigned)(getpid() * 2654435761u));
  g_hang_us = soak_hang_ms(topology) * 1000;
  snprintf(g_stack_path, sizeof g_stack_path, "%s/w%d-%d.stack", dir, idx,
           (int)getpid());
  pthread_t hw;
  if (pthread_create(&hw, NULL, hang_main, NULL) != 0)
    return 2;
  pthread_detach(hw);
  int fds0 = count_fds();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = SOAK_LEASE_MS;
  cfg.command_timeout_ms = soak_cmd_timeout_ms(topology);
  cfg.connect_timeout_ms = SOAK_CONNECT_TIMEOUT_MS;
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 100;
  cfg.on_lock_lost = on_lost;
  /* the wire adversary knows its worker by this name (wire.h) */
  snprintf(name, sizeof name, "soak-w%d-%d", idx, (int)getpid());
  cfg.client_name = name;
  cfg.log_fn = hook;
  cfg.log_level = DLOCK_LOG_DEBUG;
  if (topology == SOAK_SENTINEL)
    cfg.sync_replicas = SOAK_SENTINEL_REPLICAS; /* soak.h: why all */
  if (async) {
    logf_("K async\n");
    return async_worker(sh, &cfg, fds0);
  }
  return blocking_worker(sh, &cfg, fds0, direct);
}
