/* run.c -- one strategy, from the parent's side, in named steps: fresh
 * keys, the shared result mapping, the workers (watch.c), the tally
 * (outcome.c), and checking what really happened in Redis (here). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "seckill.h"

/* ---- Redis side of the parent ------------------------------------------ */

static void seg_name(char *buf, size_t n, const char *base, long long seg,
                     long long nseg) {
  if (nseg > 1)
    snprintf(buf, n, "%s:%lld", base, seg);
  else
    snprintf(buf, n, "%s", base);
}

/* Deletes every key of the run: its own keys (prefix*) and the lock
 * family's companions that embed the name (the names carry a hash tag, so
 * they are "redisson_lock_queue:<name>", "dlock_lock_queue::<name>", ...).
 * Bounded SCAN; on a cluster every one of them is on c's master (the
 * tag). */
static void drop_keys(redisContext *c, const char *prefix) {
  char pat[2][160];
  snprintf(pat[0], sizeof pat[0], "%s*", prefix);
  snprintf(pat[1], sizeof pat[1], "*:%s*", prefix);
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
  return sk_stock_set(c, &r->k, r->segments, r->o->stock, err, el);
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

/* Strategy "permits": a reservation left by a killed buyer is in the
 * timeout set until its lease ends; wait for it to come back into the
 * stock (dlock_permits_available reclaims it), so that the stock count
 * below includes it. One that never comes back is stock lost for good:
 * reported like a lock stuck without expiry. */
static void settle_permits(const sk_run *r, sk_result *res) {
  char err[256] = "";
  long long pending =
      sk_permits_settle(r->o->url, &r->k, r->o->lease_ms, err, sizeof err);
  if (pending < 0 && !res->first_error[0])
    snprintf(res->first_error, sizeof res->first_error, "%s", err);
  if (pending > 0) {
    res->stuck_lock = 1;
    res->stuck_ttl_ms = -1;
  }
}

/* ---- one run ------------------------------------------------------------ */

static void make_keys(sk_keys *k, int index, const char *name) {
  /* One hash tag for all of a run's keys: on a cluster they share a slot,
   * so one connection (to that slot's master) serves the naive strategies
   * and the segmented lock names stay with their stock. */
  snprintf(k->prefix, sizeof k->prefix, "seckill:{%d-%d:%s}", (int)getpid(),
           index, name);
  snprintf(k->stock, sizeof k->stock, "%s:stock", k->prefix);
  snprintf(k->orders, sizeof k->orders, "%s:orders", k->prefix);
  snprintf(k->users, sizeof k->users, "%s:users", k->prefix);
  snprintf(k->lock, sizeof k->lock, "%s:lock", k->prefix);
}

/* The parent's connection with fresh keys, or NULL with res saying why
 * the strategy was skipped. */
static redisContext *setup(const sk_run *r, sk_result *res) {
  char err[256] = "";
  redisContext *c = dlc_redis_connect_key(r->o->url, r->k.stock, SK_CONNECT_S,
                                          SK_COMMAND_S, err, sizeof err);
  if (c && prepare_keys(c, r, err, sizeof err) == 0)
    return c;
  snprintf(res->first_error, sizeof res->first_error, "%s", err);
  res->ran = 0;
  snprintf(res->skipped, sizeof res->skipped, "setup failed: %.140s", err);
  if (c)
    redisFree(c);
  return NULL;
}

/* The shared results: survive a worker killed with SIGKILL. */
static sk_shared *map_shared(size_t n, size_t *len) {
  *len = sizeof(sk_shared) + n * sizeof(uint32_t) + n;
  void *map = mmap(NULL, *len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return NULL;
  sk_shared *sh = map;
  sh->lat_us = (uint32_t *)((char *)map + sizeof(sk_shared));
  sh->outcome = (uint8_t *)(sh->lat_us + n);
  return sh;
}

static void judge(const sk_opts *o, sk_result *res) {
  res->correct = res->oversold == 0 && res->lost_updates == 0 &&
                 res->deadlocked == 0 && res->errors == 0 &&
                 res->dup_users == 0 && res->unfinished == 0 &&
                 !res->stuck_lock;
  if (!o->tty)
    fprintf(stderr, "dlock-seckill: %s: %s in %.1f s\n", res->s->name,
            res->correct ? "correct" : "FAILED", res->wall_ms / 1000.0);
}

void sk_run_strategy(const sk_opts *o, const sk_strategy *s, int index,
                     sk_result *res) {
  memset(res, 0, sizeof *res);
  res->s = s;
  if (s->kind == SK_ETCD && !o->etcd_url) {
    snprintf(res->skipped, sizeof res->skipped,
             "no etcd: install etcd-server (scripts/install-deps.sh) or give "
             "--etcd-url");
    return;
  }
  /* every etcd lock write is a quorum write (fsync'd): the defaults take
   * ~17 s here where Redis takes 1; the run gets time to finish */
  static sk_opts eo;
  if (s->kind == SK_ETCD && o->deadline_ms < 3 * 20000) {
    eo = *o;
    eo.deadline_ms = 3 * 20000;
    o = &eo;
  }
  sk_run run = {
      .o = o, .s = s, .segments = s->kind == SK_SEGMENTED ? o->segments : 1};
  make_keys(&run.k, index, s->name);
  redisContext *c = setup(&run, res);
  if (!c)
    return;
  size_t len;
  if (!(run.sh = map_shared((size_t)o->requests, &len))) {
    snprintf(res->skipped, sizeof res->skipped, "mmap: %s", strerror(errno));
    redisFree(c);
    return;
  }
  sk_procs ps;
  sk_fork_workers(&run, c, &ps, res);
  long long t_start = dlc_now_us();
  long long t_stop = sk_watch_workers(&run, &ps, res);
  sk_tally(&run, &ps, t_start, t_stop, res);
  if (s->kind == SK_PERMITS)
    settle_permits(&run, res);
  check_redis(c, &run, res);
  judge(o, res);
  drop_keys(c, run.k.prefix);
  redisFree(c);
  munmap(run.sh, len);
}
