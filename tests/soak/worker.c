/*
 * worker.c -- one soak worker process: a client through its own proxy
 * (the orchestrator blackholes it for partitions), every lock kind, one
 * critical section after another on random resources until told to stop;
 * fenced holders write their token to a fenced store and to a plain
 * register (no check: the Kleppmann scenario shows there). An async
 * worker (soak_worker's `async`) drives the event-loop client
 * (dlock/async.h) on a private poll(2) loop instead, on the plain mutex
 * resources only (the one kind with an async form); its holds go to the
 * same logs and the same checker.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "dlock/async.h"
#include "soak.h"

static int g_log = -1;

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

typedef struct objs {
  dlock_mutex *m[8];
  dlock_rwlock *rw;
  dlock_sem *sem;
} objs;

static void log_validity(const soak_res *r, dlock_mutex *m, int tag_a,
                         unsigned long long tok, int64_t t) {
  long long v = 0;
  int64_t now = soak_now_us();
  if (dlock_mutex_validity(m, &v) != 0)
    v = 0;
  /* No hold left (lost, past its deadline): nothing to extend; the
   * acquisition's own deadline is then the one logged with A. */
  int64_t until = v > 0 ? now + v * 1000 : (tag_a ? now : 0);
  if (tag_a)
    logf_("A %s %llu %lld %lld\n", r->name, tok, (long long)t,
          (long long)until);
  else
    logf_("V %s %lld\n", r->name, (long long)until);
}

/* One critical section on resource i; returns after the unlock. */
static void one_section(int idx, soak_shared *sh, objs *o, int i,
                        redisContext **store, const char *direct) {
  const soak_res *r = &soak_resources[i];
  int64_t t0 = soak_now_us();
  sh->phase[idx] = PH_WAIT;
  logf_("W %s %lld\n", r->name, (long long)t0);
  int rc;
  if (r->kind == K_SEM)
    rc = dlock_sem_timedwait(o->sem, 3000);
  else if (r->kind == K_RW_READ)
    rc = dlock_rwlock_timedrdlock(o->rw, 3000, SOAK_LEASE_MS);
  else if (r->kind == K_RW_WRITE)
    rc = dlock_rwlock_timedwrlock(o->rw, 3000, SOAK_LEASE_MS);
  else
    rc = dlock_mutex_timedlock(o->m[i], 3000, -1);
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    sh->phase[idx] = PH_IDLE;
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    usleep(10000);
    return;
  }
  uint64_t tok = 0;
  if (r->kind == K_SEM) {
    sh->phase[idx] = PH_SEM;
    logf_("A %s 0 %lld 0\n", r->name, (long long)t);
  } else if (r->kind == K_RW_READ || r->kind == K_RW_WRITE) {
    sh->phase[idx] = PH_HOLD;
    int64_t lease = SOAK_LEASE_MS - (SOAK_LEASE_MS / 100 + 2);
    logf_("A %s 0 %lld %lld\n", r->name, (long long)t,
          (long long)t0 + (long long)lease * 1000);
  } else {
    sh->phase[idx] = r->kind == K_FENCED ? PH_PRE_WRITE : PH_HOLD;
    if (r->kind == K_FENCED)
      dlock_mutex_token(o->m[i], &tok);
    log_validity(r, o->m[i], 1, tok, t);
  }
  usleep((useconds_t)(5000 + rand() % 35000));
  if (r->kind == K_FENCED) {
    store_write(store, direct, r->name, tok); /* no validity check first */
    sh->phase[idx] = PH_HOLD;
  }
  if (r->kind <= K_FENCED)
    log_validity(r, o->m[i], 0, 0, 0);
  int64_t tu = soak_now_us();
  logf_("R %s %lld\n", r->name, (long long)tu); /* the unlock begins */
  if (r->kind == K_SEM)
    rc = dlock_sem_post(o->sem);
  else if (r->kind == K_RW_READ || r->kind == K_RW_WRITE)
    rc = dlock_rwlock_unlock(o->rw);
  else
    rc = dlock_mutex_unlock(o->m[i]);
  sh->phase[idx] = PH_IDLE;
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu,
        (long long)soak_now_us());
}

static int make_objs(dlock_client *c, objs *o) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < soak_nresources; i++) {
    const soak_res *r = &soak_resources[i];
    int rc = 0;
    if (r->kind == K_MUTEX)
      rc = dlock_mutex_new(c, r->lock, &o->m[i]);
    else if (r->kind == K_FAIR)
      rc = dlock_mutex_new_fair(c, r->lock, &o->m[i]);
    else if (r->kind == K_FENCED)
      rc = dlock_mutex_new_fenced(c, r->lock, &o->m[i]);
    else if (r->kind == K_SEM && !o->sem)
      rc = dlock_sem_new(c, r->lock, &o->sem);
    else if (!o->rw && (r->kind == K_RW_READ || r->kind == K_RW_WRITE))
      rc = dlock_rwlock_new(c, r->lock, &o->rw);
    if (rc)
      return rc;
  }
  return 0;
}

static void free_objs(objs *o) {
  for (int i = 0; i < 8; i++)
    dlock_mutex_free(o->m[i]);
  dlock_rwlock_free(o->rw);
  dlock_sem_free(o->sem);
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

/* Runs the loop until x's call answered (bounded: a call's wait and retry
 * policy are far shorter than 60 s; past it the process gives up and the
 * orchestrator restarts it). */
static int await(done *x) {
  int64_t end = soak_now_us() + 60000000;
  while (x->n == 0 && soak_now_us() < end)
    turn(5000);
  if (x->n == 0) {
    logf_("X async call never answered\n");
    _exit(5);
  }
  return x->rc;
}

/* Lets us pass with the loop turning (renewals run). */
static void pump(int64_t us) {
  int64_t end = soak_now_us() + us;
  while (soak_now_us() < end)
    turn(end - soak_now_us());
}

/* One critical section of the async worker on a plain mutex resource. The
 * async client has no validity call: `until` in its A line is the first
 * lease counted from the start of the wait (a lower bound of the key's
 * expiry); the hold ends at the earliest of that, its unlock and its loss
 * report (checker.c). */
static void async_section(int idx, soak_shared *sh, int i) {
  const soak_res *r = &soak_resources[i];
  int64_t t0 = soak_now_us();
  sh->phase[idx] = PH_WAIT;
  logf_("W %s %lld\n", r->name, (long long)t0);
  done x = {0, 0};
  int rc = dlock_async_lock(g_loop.a, r->lock, 1, 3000, -1, on_done, &x);
  if (rc == 0)
    rc = await(&x);
  int64_t t = soak_now_us();
  if (rc != DLOCK_OK) {
    sh->phase[idx] = PH_IDLE;
    logf_("F %s %d %lld\n", r->name, rc, (long long)t);
    pump(10000);
    return;
  }
  sh->phase[idx] = PH_HOLD;
  int64_t lease = SOAK_LEASE_MS - (SOAK_LEASE_MS / 100 + 2);
  logf_("A %s 0 %lld %lld\n", r->name, (long long)t,
        (long long)t0 + (long long)lease * 1000);
  pump(5000 + rand() % 35000);
  int64_t tu = soak_now_us();
  logf_("R %s %lld\n", r->name, (long long)tu); /* the unlock begins */
  done y = {0, 0};
  rc = dlock_async_unlock(g_loop.a, r->lock, 1, on_done, &y);
  if (rc == 0)
    rc = await(&y);
  sh->phase[idx] = PH_IDLE;
  logf_("U %s %d %lld %lld\n", r->name, rc, (long long)tu,
        (long long)soak_now_us());
}

static int async_worker(int idx, soak_shared *sh, dlock_config *cfg, int fds0) {
  static const dlock_async_hooks hooks = {NULL,        h_add_read,  h_del_read,
                                          h_add_write, h_del_write, h_release,
                                          h_schedule,  h_cancel,    h_cleanup};
  g_loop.timer_at = -1;
  if (dlock_async_new(cfg, &g_loop.a) != 0 ||
      dlock_async_attach(g_loop.a, &hooks) != 0) {
    logf_("X %s\n", dlock_last_error());
    return 4;
  }
  int mx[8], nmx = 0;
  for (int i = 0; i < soak_nresources && nmx < 8; i++)
    if (soak_resources[i].kind == K_MUTEX)
      mx[nmx++] = i;
  if (nmx == 0) /* the resource table has plain mutexes: never */
    return 4;
  long rss0 = 0, rss1 = 0;
  for (long it = 0; !sh->stop; it++) {
    async_section(idx, sh, mx[rand() % nmx]);
    if (it % 100 == 0) {
      rss1 = rss_kb();
      if (it == 300)
        rss0 = rss1;
      logf_("M %ld %d\n", rss1, count_fds());
    }
  }
  dlock_async_free(g_loop.a);
  log_fds(fds0);
  logf_("E %d %d %ld %ld\n", fds0, count_fds(), rss0, rss1);
  return 0;
}

int soak_worker(int idx, const char *url, const char *direct, const char *dir,
                int topology, int async, soak_shared *sh) {
  char path[512];
  snprintf(path, sizeof path, "%s/w%d-%d.log", dir, idx, (int)getpid());
  g_log = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_log < 0)
    return 2;
  srand((unsigned)(getpid() * 2654435761u));
  int fds0 = count_fds();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = SOAK_LEASE_MS;
  cfg.command_timeout_ms = 500;
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 100;
  cfg.on_lock_lost = on_lost;
  if (topology == SOAK_SENTINEL)
    cfg.sync_replicas = SOAK_SENTINEL_REPLICAS; /* soak.h: why all */
  if (async) {
    logf_("K async\n");
    return async_worker(idx, sh, &cfg, fds0);
  }
  dlock_client *c;
  objs o;
  if (dlock_client_new(&cfg, &c) != 0 || make_objs(c, &o) != 0) {
    logf_("X %s\n", dlock_last_error()); /* Redis down right now: retry */
    return 4;
  }
  redisContext *store = NULL;
  long rss0 = 0, rss1 = 0;
  for (long it = 0; !sh->stop; it++) {
    int i = rand() % soak_nresources;
    if (!soak_res_in(i, topology))
      continue;
    one_section(idx, sh, &o, i, &store, direct);
    if (it % 100 == 0) {
      rss1 = rss_kb();
      if (it == 300)
        rss0 = rss1;
      logf_("M %ld %d\n", rss1, count_fds());
    }
  }
  if (store)
    redisFree(store);
  free_objs(&o);
  dlock_client_free(c);
  log_fds(fds0);
  logf_("E %d %d %ld %ld\n", fds0, count_fds(), rss0, rss1);
  return 0;
}
