/* run.c -- one strategy, from the parent's side: fresh keys, the shared
 * result mapping, the forked workers, watching them (start signal,
 * progress line, --kill-holder, stall and deadline), stopping them in
 * bounded time, and checking what really happened in Redis. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seckill.h"

#define SK_MAX_PROCS 64

/* ---- Redis side of the parent ------------------------------------------ */

static redisReply *pcmd(redisContext *c, char *err, size_t el, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!r) {
    snprintf(err, el, "redis: %s", c->errstr);
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(err, el, "redis: %s", r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

static void seg_name(char *buf, size_t n, const char *base, long long seg,
                     long long nseg) {
  if (nseg > 1)
    snprintf(buf, n, "%s:%lld", base, seg);
  else
    snprintf(buf, n, "%s", base);
}

/* Deletes every key of the run: its own keys (prefix*) and the lock
 * family's companions that embed the name ("redisson_lock_queue:{name}",
 * ...). Bounded SCAN. */
static void drop_keys(redisContext *c, const char *prefix) {
  char pat[2][160];
  snprintf(pat[0], sizeof pat[0], "%s*", prefix);
  snprintf(pat[1], sizeof pat[1], "*{%s*", prefix);
  for (int p = 0; p < 2; p++) {
    char cursor[32] = "0";
    for (int i = 0; i < 10000; i++) {
      redisReply *r =
          redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pat[p]);
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        if (r)
          freeReplyObject(r);
        break;
      }
      snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
      redisReply *keys = r->element[1];
      for (size_t k = 0; k < keys->elements; k++) {
        redisReply *d = redisCommand(c, "DEL %s", keys->element[k]->str);
        if (d)
          freeReplyObject(d);
      }
      freeReplyObject(r);
      if (strcmp(cursor, "0") == 0)
        break;
    }
  }
}

static int prepare_keys(redisContext *c, const sk_run *r, char *err,
                        size_t el) {
  drop_keys(c, r->k.prefix);
  long long base = r->o->stock / r->segments;
  long long extra = r->o->stock % r->segments;
  for (long long s = 0; s < r->segments; s++) {
    char key[160];
    seg_name(key, sizeof key, r->k.stock, s, r->segments);
    redisReply *x =
        pcmd(c, err, el, "SET %s %lld", key, base + (s < extra ? 1 : 0));
    if (!x)
      return -1;
    freeReplyObject(x);
  }
  redisReply *x = pcmd(c, err, el, "SET %s 0", r->k.orders);
  if (!x)
    return -1;
  freeReplyObject(x);
  return 0;
}

static long long get_num(redisContext *c, const char *key, int *ok) {
  redisReply *r = redisCommand(c, "GET %s", key);
  long long v = 0;
  if (!r) {
    *ok = 0;
    return 0;
  }
  if (r->type == REDIS_REPLY_STRING)
    v = strtoll(r->str, NULL, 10);
  else if (r->type != REDIS_REPLY_NIL)
    *ok = 0;
  freeReplyObject(r);
  return v;
}

/* What Redis says after the run: orders, stock left, duplicate users,
 * and a lock key left behind without expiry. */
static void check_redis(redisContext *c, const sk_run *r, sk_result *res) {
  int ok = 1;
  res->orders = get_num(c, r->k.orders, &ok);
  res->final_stock = 0;
  for (long long s = 0; s < r->segments; s++) {
    char key[160];
    seg_name(key, sizeof key, r->k.stock, s, r->segments);
    res->final_stock += get_num(c, key, &ok);
  }
  if (r->o->users > 0) {
    redisReply *h = redisCommand(c, "HVALS %s", r->k.users);
    if (h && h->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < h->elements; i++) {
        long long n = strtoll(h->element[i]->str, NULL, 10);
        if (n > 1) {
          res->dup_users++;
          res->dup_orders += n - 1;
        }
      }
    } else {
      ok = 0;
    }
    if (h)
      freeReplyObject(h);
  }
  /* a lock key that will never expire = the lock is gone for good */
  for (long long s = 0; s < r->segments && r->s->kind != SK_REDLOCK; s++) {
    char key[160];
    seg_name(key, sizeof key, r->k.lock, s, r->segments);
    redisReply *t = redisCommand(c, "PTTL %s", key);
    if (t && t->type == REDIS_REPLY_INTEGER && t->integer == -1) {
      res->stuck_lock = 1;
      res->stuck_ttl_ms = -1;
    }
    if (t)
      freeReplyObject(t);
  }
  if (!ok && !res->first_error[0])
    snprintf(res->first_error, sizeof res->first_error,
             "could not read the result keys back");
  long long init = r->o->stock;
  long long over = res->orders - init;
  res->oversold =
      (over > 0 ? over : 0) + (res->final_stock < 0 ? -res->final_stock : 0);
  /* every order should have taken one item off the stock */
  long long taken = init - res->final_stock;
  res->lost_updates = res->orders > taken ? res->orders - taken : 0;
}

/* ---- progress ------------------------------------------------------------ */

static void progress(const sk_opts *o, const sk_strategy *s, long long done,
                     long long total, double secs, const char *state) {
  if (!o->tty)
    return;
  fprintf(stderr, "\r\033[K  %-13s %7lld/%lld requests  %5.1f s  %s", s->name,
          done, total, secs, state);
  fflush(stderr);
}

/* ---- one run ---------------------------------------------------------- */

static void kill_all(pid_t *pids, int n, int sig) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0)
      kill(pids[i], sig);
}

/* Reaps what has exited; returns how many are still running. */
static int reap(pid_t *pids, int *status, int n) {
  int alive = 0;
  for (int i = 0; i < n; i++) {
    if (pids[i] <= 0)
      continue;
    int st;
    pid_t w = waitpid(pids[i], &st, WNOHANG);
    if (w == pids[i]) {
      status[i] = st;
      pids[i] = -pids[i]; /* keep the number, mark reaped */
    } else {
      alive++;
    }
  }
  return alive;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

void sk_run_strategy(const sk_opts *o, const sk_strategy *s, int index,
                     sk_result *res) {
  memset(res, 0, sizeof *res);
  res->s = s;
  sk_run run;
  memset(&run, 0, sizeof run);
  run.o = o;
  run.s = s;
  run.segments = s->kind == SK_SEGMENTED ? o->segments : 1;
#ifndef SK_HAVE_REDLOCK
  if (s->kind == SK_REDLOCK) {
    res->ran = 0;
    snprintf(res->skipped, sizeof res->skipped, "not built");
    return;
  }
#endif
  sk_keys *k = &run.k;
  snprintf(k->prefix, sizeof k->prefix, "seckill:%d-%d:%s", (int)getpid(),
           index, s->name);
  snprintf(k->stock, sizeof k->stock, "%s:stock", k->prefix);
  snprintf(k->orders, sizeof k->orders, "%s:orders", k->prefix);
  snprintf(k->users, sizeof k->users, "%s:users", k->prefix);
  snprintf(k->lock, sizeof k->lock, "%s:lock", k->prefix);

  char err[256] = "";
  redisContext *c = sk_connect(o->url, err, sizeof err);
  if (!c || prepare_keys(c, &run, err, sizeof err) != 0) {
    snprintf(res->first_error, sizeof res->first_error, "%s", err);
    res->ran = 0;
    snprintf(res->skipped, sizeof res->skipped, "setup failed: %.140s", err);
    if (c)
      redisFree(c);
    return;
  }

  /* shared results: survive a worker killed with SIGKILL */
  size_t n = (size_t)o->requests;
  size_t len = sizeof(sk_shared) + n * sizeof(uint32_t) + n;
  void *map = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    snprintf(res->skipped, sizeof res->skipped, "mmap: %s", strerror(errno));
    redisFree(c);
    return;
  }
  sk_shared *sh = map;
  sh->lat_us = (uint32_t *)((char *)map + sizeof(sk_shared));
  sh->outcome = (uint8_t *)(sh->lat_us + n);
  run.sh = sh;

  fflush(stdout);
  fflush(stderr);
  pid_t pids[SK_MAX_PROCS];
  int status[SK_MAX_PROCS];
  int np = (int)o->procs;
  memset(status, 0, sizeof status);
  int forked = 0;
  for (int w = 0; w < np; w++) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      redisFree(c); /* the parent's connection is not ours */
      sk_worker_main(&run, w);
    }
    if (pid < 0) {
      snprintf(res->first_error, sizeof res->first_error, "fork: %s",
               strerror(errno));
      break;
    }
    pids[w] = pid;
    forked++;
  }
  pid_t victim = forked > 0 ? pids[0] : 0;

  long long total = o->requests;
  long long stall_ms = sk_stall_ms(o, s);
  long long t_start = sk_now_us();
  int need = forked * (int)o->threads;
  /* wait for every thread to be connected (bounded), then start together */
  for (int i = 0; i < 1500 && atomic_load(&sh->ready) < need; i++) {
    if (reap(pids, status, forked) == 0)
      break;
    sk_sleep_us(10000);
  }
  sh->go_us = sk_now_us();
  atomic_store(&sh->last_end_us, sh->go_us);
  atomic_store(&sh->go, 1);
  res->ran = 1;

  long long next_progress = 0;
  const char *state = "running";
  for (;;) {
    long long now = sk_now_us();
    int alive = reap(pids, status, forked);
    long long done = atomic_load(&sh->done);
    if (alive == 0)
      break;
    if (o->kill_holder && !res->victim_killed &&
        atomic_load(&sh->victim_at_killpoint)) {
      kill(victim, SIGKILL);
      res->victim_killed = 1;
      atomic_store(&sh->victim_killed, 1);
      state = "worker 0 killed while holding";
    }
    long long idle_ms = (now - atomic_load(&sh->last_end_us)) / 1000;
    long long run_ms = (now - sh->go_us) / 1000;
    if (done < total && idle_ms >= stall_ms) {
      res->stopped = 1; /* nobody finished anything for stall_ms: stuck */
      break;
    }
    if (run_ms >= o->deadline_ms) {
      res->stopped = 2;
      break;
    }
    if (now >= next_progress) {
      progress(o, s, done, total, run_ms / 1000.0, state);
      next_progress = now + 100000;
    }
    sk_sleep_us(5000);
  }
  long long t_stop = sk_now_us();
  if (res->stopped) {
    progress(o, s, atomic_load(&sh->done), total, (t_stop - sh->go_us) / 1e6,
             res->stopped == 1 ? "stuck: stopping" : "deadline: stopping");
    atomic_store(&sh->abort, 1);
    /* waiting threads notice within a spin (ms) or a cancel (20 ms); a
     * thread in the middle of its work finishes it. Bounded, then kill. */
    for (int i = 0; i < 500 && reap(pids, status, forked) > 0; i++)
      sk_sleep_us(10000);
    if (reap(pids, status, forked) > 0) {
      kill_all(pids, forked, SIGKILL);
      for (int i = 0; i < 500 && reap(pids, status, forked) > 0; i++)
        sk_sleep_us(10000);
    }
  }
  if (o->tty)
    fprintf(stderr, "\r\033[K");

  /* outcomes */
  long long vfirst = 0, vcount = 0;
  if (res->victim_killed)
    sk_request_range(o, 0, &vfirst, &vcount);
  uint32_t *lat = malloc(n * sizeof *lat);
  size_t nl = 0;
  long long finished = 0;
  for (long long i = 0; i < total; i++) {
    int out = sh->outcome[i];
    int in_victim = res->victim_killed && i >= vfirst && i < vfirst + vcount;
    switch (out) {
    case SK_O_ORDER:
    case SK_O_SOLDOUT:
    case SK_O_DUPLICATE:
    case SK_O_ERROR:
      if (out == SK_O_SOLDOUT)
        res->soldout++;
      else if (out == SK_O_DUPLICATE)
        res->duplicates_rejected++;
      else if (out == SK_O_ERROR)
        res->errors++;
      finished++;
      if (lat)
        lat[nl++] = sh->lat_us[i];
      break;
    case SK_O_DEADLOCK:
      res->deadlocked++;
      break;
    default: /* never finished */
      if (in_victim)
        res->killed++;
      else if (res->stopped == 2)
        res->unfinished++;
      else if (res->stopped == 1)
        res->deadlocked++;
      else
        res->errors++; /* its worker died or never started */
      break;
    }
  }
  /* a deadline while requests still finished: they were slow, not stuck */
  if (res->stopped == 2) {
    long long idle_ms = (t_stop - atomic_load(&sh->last_end_us)) / 1000;
    if (idle_ms < stall_ms) {
      res->unfinished += res->deadlocked;
      res->deadlocked = 0;
    } else {
      res->deadlocked += res->unfinished;
      res->unfinished = 0;
    }
  }
  res->errors += atomic_load(&sh->unlock_errors);
  for (int w = 0; w < forked; w++) {
    if (pids[w] == victim && res->victim_killed)
      continue;
    int st = status[w];
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && !res->first_error[0])
      snprintf(res->first_error, sizeof res->first_error,
               "worker %d exited with status %d", w, WEXITSTATUS(st));
  }
  if (sh->errmsg[0])
    snprintf(res->first_error, sizeof res->first_error, "%s", sh->errmsg);
  long long end_us = atomic_load(&sh->last_end_us);
  double secs = (end_us - sh->go_us) / 1e6;
  res->wall_ms = (t_stop - t_start) / 1000.0;
  res->throughput = secs > 0 ? finished / secs : 0;
  if (lat && nl > 0) {
    qsort(lat, nl, sizeof *lat, cmp_u32);
    res->p50_ms = lat[(nl - 1) / 2] / 1000.0;
    res->p99_ms = lat[(size_t)((double)(nl - 1) * 0.99)] / 1000.0;
  }
  free(lat);
  check_redis(c, &run, res);
  res->correct = res->oversold == 0 && res->lost_updates == 0 &&
                 res->deadlocked == 0 && res->errors == 0 &&
                 res->dup_users == 0 && res->unfinished == 0 &&
                 !res->stuck_lock;
  drop_keys(c, k->prefix);
  redisFree(c);
  munmap(map, len);
  if (!o->tty)
    fprintf(stderr, "dlock-seckill: %s: %s in %.1f s\n", s->name,
            res->correct ? "correct" : "FAILED", res->wall_ms / 1000.0);
}
