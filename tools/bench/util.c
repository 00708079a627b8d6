/* util.c -- clocks, CPU and memory readings, samples, Redis helpers. */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "url.h"
#include "dlock.h"

/* ---- logging ------------------------------------------------------------ */

void bench_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("# ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static int g_child; /* set in forked workers: they _exit, never exit */

void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dlock-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (g_child)
    _exit(2);
  exit(2);
}

int bench_selected(const bench_opts *o, const char *name) {
  if (!o->only[0])
    return 1;
  size_t n = strlen(name);
  const char *p = o->only;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && strncmp(p, name, n) == 0)
      return 1;
    if (!e)
      break;
    p = e + 1;
  }
  return 0;
}

/* ---- time, CPU, memory -------------------------------------------------- */

static double ru_us(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec * 1e6 + (double)ru->ru_utime.tv_usec +
         (double)ru->ru_stime.tv_sec * 1e6 + (double)ru->ru_stime.tv_usec;
}

double bench_cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru_us(&ru);
}

double bench_ctxsw(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_nvcsw + (double)ru.ru_nivcsw;
}

double bench_thread_cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru_us(&ru);
}

long long bench_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, res = 0;
  if (!f)
    return -1;
  if (fscanf(f, "%lld %lld", &size, &res) != 2)
    res = -1;
  fclose(f);
  return res < 0 ? -1 : res * (long long)sysconf(_SC_PAGESIZE);
}

long long bench_heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2();
  return (long long)mi.uordblks + (long long)mi.hblkhd;
#else
  return -1;
#endif
}

/* ---- samples ------------------------------------------------------------ */

void bs_init(bench_samples *s) { memset(s, 0, sizeof *s); }

void bs_free(bench_samples *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}

static void bs_reserve(bench_samples *s, size_t more) {
  if (s->n + more <= s->cap)
    return;
  size_t nc = s->cap ? s->cap : 1024;
  while (nc < s->n + more)
    nc *= 2;
  double *nv = realloc(s->v, nc * sizeof *nv);
  if (!nv)
    bench_die("out of memory for %zu samples", nc);
  s->v = nv;
  s->cap = nc;
}

void bs_add(bench_samples *s, double us) {
  bs_reserve(s, 1);
  s->v[s->n++] = us;
  s->sorted = 0;
}

void bs_add_many(bench_samples *s, const float *v, size_t n) {
  bs_reserve(s, n);
  for (size_t i = 0; i < n; i++)
    s->v[s->n++] = v[i];
  s->sorted = 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bs_pct(bench_samples *s, double p) {
  if (s->n == 0)
    return NAN;
  if (!s->sorted) {
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    s->sorted = 1;
  }
  double r = ceil(p / 100.0 * (double)s->n);
  size_t i = r < 1 ? 0 : (size_t)r - 1;
  if (i >= s->n)
    i = s->n - 1;
  return s->v[i];
}

double bench_median(double *v, int n) {
  if (n <= 0)
    return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bs_max(bench_samples *s) { return bs_pct(s, 100); }
double bs_min(bench_samples *s) { return bs_pct(s, 0); }

/* ---- Redis -------------------------------------------------------------- */

redisContext *bench_connect(const bench_opts *o) {
  char err[512];
  redisContext *c = dlc_redis_connect(o->url, 10, 30, err, sizeof err);
  if (!c)
    bench_die("cannot connect to %s: %s", o->url, err);
  return c;
}

redisReply *bench_cmd(redisContext *c, int argc, const char **argv) {
  redisReply *r = redisCommandArgv(c, argc, argv, NULL);
  if (!r)
    bench_die("redis: %s", c->errstr);
  return r;
}

redisReply *bench_cmdf(redisContext *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!r)
    bench_die("redis: %s", c->errstr);
  return r;
}

double bench_redis_cpu_s(redisContext *c) {
  redisReply *r = bench_cmdf(c, "INFO cpu");
  if (r->type != REDIS_REPLY_STRING)
    bench_die("INFO cpu: unexpected reply");
  double user = 0, sys = 0;
  const char *u = strstr(r->str, "used_cpu_user:");
  const char *s = strstr(r->str, "used_cpu_sys:");
  if (u)
    user = strtod(u + 14, NULL);
  if (s)
    sys = strtod(s + 13, NULL);
  freeReplyObject(r);
  return user + sys;
}

void bench_cmdstats_read(redisContext *c, bench_cmdstats *out) {
  memset(out, 0, sizeof *out);
  redisReply *r = bench_cmdf(c, "INFO commandstats");
  if (r->type != REDIS_REPLY_STRING)
    bench_die("INFO commandstats: unexpected reply");
  const char *p = r->str;
  while ((p = strstr(p, "cmdstat_")) != NULL) {
    p += 8;
    const char *colon = strchr(p, ':');
    if (!colon)
      break;
    size_t nl = (size_t)(colon - p);
    long long calls = 0, usec = 0;
    if (sscanf(colon, ":calls=%lld,usec=%lld", &calls, &usec) != 2)
      continue;
    if (nl == 4 && strncmp(p, "info", 4) == 0)
      continue;
    if (nl >= 6 && strncmp(p, "config", 6) == 0)
      continue;
    out->all_usec += usec;
    if (nl == 7 && strncmp(p, "evalsha", 7) == 0) {
      out->evalsha += calls;
      out->script_usec += usec;
    } else if (nl == 4 && strncmp(p, "eval", 4) == 0) {
      out->eval += calls;
      out->script_usec += usec;
    } else {
      out->other += calls;
    }
  }
  freeReplyObject(r);
}

void bench_cmdstats_delta(const bench_cmdstats *a, const bench_cmdstats *b,
                          bench_cmdstats *d) {
  d->evalsha = b->evalsha - a->evalsha;
  d->eval = b->eval - a->eval;
  d->other = b->other - a->other;
  d->script_usec = b->script_usec - a->script_usec;
  d->all_usec = b->all_usec - a->all_usec;
}

#define MONITOR_END "dlock-bench:monitor:end"

void bench_monitor_start(const bench_opts *o, bench_monitor *m) {
  memset(m, 0, sizeof *m);
  m->mon = bench_connect(o);
  redisReply *r = bench_cmdf(m->mon, "MONITOR");
  if (r->type == REDIS_REPLY_ERROR)
    bench_die("MONITOR refused: %s", r->str);
  freeReplyObject(r);
}

/* One MONITOR line: 1700000000.123456 [0 unix:/path] "EVALSHA" "..." or
 * [0 lua] "hset" ... */
static void monitor_line(bench_monitor *m, const char *s) {
  const char *br = strchr(s, '[');
  const char *close = br ? strchr(br, ']') : NULL;
  if (!close)
    return;
  int in_lua = strstr(br, " lua]") != NULL && strstr(br, " lua]") < close + 1;
  const char *q = strchr(close, '"');
  if (!q)
    return;
  q++;
  const char *qe = strchr(q, '"');
  if (!qe)
    return;
  size_t n = (size_t)(qe - q);
  if (in_lua) {
    m->in_script++;
    return;
  }
  if (n == 7 && strncasecmp(q, "evalsha", 7) == 0)
    m->evalsha++;
  else if (n == 4 && strncasecmp(q, "eval", 4) == 0)
    m->eval++;
  else if ((n == 4 && strncasecmp(q, "info", 4) == 0) ||
           (n == 4 && strncasecmp(q, "echo", 4) == 0))
    return;
  else
    m->other++;
}

void bench_monitor_stop(bench_monitor *m, redisContext *ctl) {
  redisReply *r = bench_cmdf(ctl, "ECHO %s", MONITOR_END);
  freeReplyObject(r);
  struct timeval tv = {10, 0};
  redisSetTimeout(m->mon, tv);
  for (long i = 0; i < 50000000L; i++) {
    void *rep = NULL;
    if (redisGetReply(m->mon, &rep) != REDIS_OK || !rep) {
      bench_log("MONITOR: log ended early (%s)", m->mon->errstr);
      break;
    }
    redisReply *x = rep;
    int done = 0;
    if (x->type == REDIS_REPLY_STATUS || x->type == REDIS_REPLY_STRING) {
      if (strstr(x->str, MONITOR_END))
        done = 1;
      else
        monitor_line(m, x->str);
    }
    freeReplyObject(x);
    if (done)
      break;
  }
  redisFree(m->mon);
  m->mon = NULL;
}

/* ---- shared memory ------------------------------------------------------ */

void bench_worker_ready(atomic_int *ready, atomic_int *go) {
  atomic_fetch_add(ready, 1);
  int64_t give_up = dlc_now_ns() + (int64_t)60e9;
  while (!atomic_load(go)) {
    if (dlc_now_ns() > give_up)
      _exit(1);
    dlc_sleep_ns(100000);
  }
}

void *bench_shm(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    bench_die("mmap %zu bytes: %s", bytes, strerror(errno));
  return p;
}

void bench_shm_free(void *p, size_t bytes) {
  if (p)
    munmap(p, bytes);
}

/* ---- library client ----------------------------------------------------- */

dlock_client *bench_client(const bench_opts *o, int threads, int watchdog_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = o->url;
  if (threads > cfg.pool_size)
    cfg.pool_size = threads;
  if (watchdog_ms > 0)
    cfg.watchdog_timeout_ms = watchdog_ms;
  if (o->multiplex >= 0)
    cfg.multiplex = o->multiplex;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    bench_die("dlock_client_new(%s): %s: %s", o->url, dlock_err_name(rc),
              dlock_last_error());
  return c;
}

/* ---- worker processes --------------------------------------------------- */

int *bench_fork(int n, bench_worker_fn fn, void *arg) {
  int *pids = calloc((size_t)n, sizeof *pids);
  if (!pids)
    bench_die("out of memory");
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    pid_t p = fork();
    if (p < 0)
      bench_die("fork: %s", strerror(errno));
    if (p == 0) {
      /* Die with the parent: a killed bench leaves no worker behind. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      g_child = 1;
      fn(i, arg);
      _exit(0);
    }
    pids[i] = (int)p;
  }
  return pids;
}

int bench_reap(int *pids, int n, int64_t deadline_ns) {
  int left = n, bad = 0;
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      if (pids[i] <= 0)
        continue;
      int st = 0;
      pid_t r = waitpid(pids[i], &st, WNOHANG);
      if (r == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          bad++;
        pids[i] = 0;
        left--;
      }
    }
    if (left == 0)
      break;
    if (dlc_now_ns() > deadline_ns) {
      for (int i = 0; i < n; i++) {
        if (pids[i] <= 0)
          continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        pids[i] = 0;
        bad++;
      }
      bench_log("workers did not finish in time: killed");
      break;
    }
    dlc_sleep_ns(2000000);
  }
  free(pids);
  return bad;
}
