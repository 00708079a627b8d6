/* worker.c -- one worker process (a "service instance"): --threads threads
 * each take the next request of this worker's share and handle it with the
 * run's strategy (engine.c: the naive schemes talk to Redis with plain
 * hiredis, the way the articles write them; dlock, segmented, fair and
 * redlock use the public dlock API). Everything here runs in a forked
 * child: the dlock client is created here, after fork, and never crosses
 * one. */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "engine.h"
#include "seckill.h"

typedef struct sk_proc {
  const sk_run *r;
  const sk_opts *o;
  sk_shared *sh;
  int w;
  long long first, count;
  atomic_llong next;       /* next request offset in this worker's share */
  atomic_llong completed;  /* requests finished by this worker */
  atomic_int kill_claimed; /* --kill-holder: the one victim request */
  long long kill_after;
  sk_engine e;             /* the strategy's locks, shared by the threads */
  atomic_int threads_left; /* the watcher stops when this reaches 0 */
} sk_proc;

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* ---- the engine's hooks ------------------------------------------------- */

static int hook_aborted(sk_eth *th) {
  const sk_proc *p = th->e->user;
  return atomic_load(&p->sh->abort) != 0;
}

/* The first error message of the run, written once. */
static void note_error_msg(sk_shared *sh, const char *msg) {
  int exp = 0;
  if (!atomic_compare_exchange_strong(&sh->errmsg_claimed, &exp, 1))
    return;
  snprintf(sh->errmsg, sizeof sh->errmsg, "%s", msg);
}

static void hook_error(sk_eth *th, const char *msg) {
  const sk_proc *p = th->e->user;
  note_error_msg(p->sh, msg);
}

/* --kill-holder: the victim worker (number 0), once it has finished a
 * tenth of its share, stops at its strategy's kill point and tells the
 * parent, which kills it with SIGKILL. Bounded: it goes on after 5 s. */
static void hook_killpoint(sk_eth *th, enum sk_killpoint kp) {
  sk_proc *p = th->e->user;
  if (!p->o->kill_holder || p->w != 0 || kp != p->r->s->killpoint)
    return;
  if (atomic_load(&p->completed) < p->kill_after)
    return;
  int exp = 0;
  if (!atomic_compare_exchange_strong(&p->kill_claimed, &exp, 1))
    return;
  atomic_store(&p->sh->victim_at_killpoint, 1);
  for (int i = 0; i < 500 && !hook_aborted(th); i++)
    dlc_sleep_us(10000);
}

static int request(sk_eth *th, long long idx) {
  const sk_proc *p = th->e->user;
  char uidbuf[32];
  const char *uid = NULL;
  long long user = 0;
  if (p->o->users > 0) {
    /* the same request number is the same user in every strategy */
    user = (long long)(mix64((uint64_t)idx) % (uint64_t)p->o->users);
    snprintf(uidbuf, sizeof uidbuf, "u%lld", user);
    uid = uidbuf;
  }
  return sk_engine_request(th, uid, user);
}

/* ---- threads and the process ------------------------------------------ */

/* Ends the dlock waits of this worker once the parent stops the run, and
 * keeps ending them (a thread may start a wait just after a cancel) until
 * every request thread is gone. */
static void *watcher_main(void *arg) {
  sk_proc *p = arg;
  int cancelling = 0;
  while (atomic_load(&p->threads_left) > 0) {
    if (atomic_load(&p->sh->abort))
      cancelling = 1;
    if (cancelling)
      sk_engine_cancel_waits(&p->e);
    dlc_sleep_us(cancelling ? 20000 : 10000);
  }
  return NULL;
}

static void *thread_main(void *arg) {
  sk_eth *th = arg;
  sk_proc *p = th->e->user;
  sk_shared *sh = p->sh;
  char err[200];
  th->rc = dlc_redis_connect_key(p->o->url, th->e->k.stock, SK_CONNECT_S,
                                 SK_COMMAND_S, err, sizeof err);
  if (!th->rc)
    note_error_msg(sh, err);
  atomic_fetch_add(&sh->ready, 1);
  for (int i = 0; i < 60000 && !atomic_load(&sh->go); i++) {
    if (atomic_load(&sh->abort))
      break;
    dlc_sleep_us(1000);
  }
  while (atomic_load(&sh->go) && !hook_aborted(th)) {
    long long i = atomic_fetch_add(&p->next, 1);
    if (i >= p->count)
      break;
    long long idx = p->first + i;
    long long t0 = dlc_now_us();
    int out = request(th, idx);
    long long t1 = dlc_now_us();
    sh->lat_us[idx] =
        (uint32_t)(t1 - t0 > 0xffffffffLL ? 0xffffffffLL : t1 - t0);
    sh->outcome[idx] = (uint8_t)out;
    atomic_fetch_add(&sh->done, 1);
    atomic_fetch_add(&p->completed, 1);
    if (out != SK_O_DEADLOCK) {
      long long prev = atomic_load(&sh->last_end_us);
      while (prev < t1 &&
             !atomic_compare_exchange_weak(&sh->last_end_us, &prev, t1)) {
      }
    }
  }
  sk_eth_close(th);
  atomic_fetch_sub(&p->threads_left, 1);
  return NULL;
}

void sk_request_range(const sk_opts *o, int w, long long *first,
                      long long *count) {
  long long base = o->requests / o->procs, extra = o->requests % o->procs;
  *count = base + (w < extra ? 1 : 0);
  *first = w * base + (w < extra ? w : extra);
}

/* The engine of this worker: the run's strategy, keys and options. */
static void engine_setup(sk_proc *p) {
  const sk_run *r = p->r;
  const sk_opts *o = p->o;
  sk_engine *e = &p->e;
  e->s = r->s;
  e->url = o->url;
  e->lock_url = r->s->kind == SK_ETCD ? o->etcd_url : NULL;
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    e->redlock_urls[i] = o->redlock_urls[i];
  e->k = r->k;
  e->segments = r->segments;
  e->lease_ms = o->lease_ms;
  e->watchdog_ms = o->watchdog_ms;
  e->threads = o->threads;
  e->work_min_ms = o->work_min_ms;
  e->work_max_ms = o->work_max_ms;
  e->aborted = hook_aborted;
  e->on_error = hook_error;
  e->killpoint = hook_killpoint;
  e->user = p;
  e->unlock_errors = &p->sh->unlock_errors;
}

void sk_worker_main(const sk_run *r, int w) {
  static sk_proc p; /* one per process */
  memset(&p, 0, sizeof p);
  p.r = r;
  p.o = r->o;
  p.sh = r->sh;
  p.w = w;
  sk_request_range(r->o, w, &p.first, &p.count);
  /* the victim stops at its kill point after a couple of requests: early
   * enough that lock-free schemes still have stock to reserve */
  p.kill_after = p.count / 10 < 2 ? p.count / 10 : 2;
  signal(SIGPIPE, SIG_IGN);
  engine_setup(&p);
  char err[256] = "";
  if (sk_engine_init(&p.e, err, sizeof err) != 0) {
    note_error_msg(p.sh, err);
    /* count the threads as ready so the parent does not wait for them;
     * every request of this worker stays pending -> reported */
    atomic_fetch_add(&p.sh->ready, (int)r->o->threads);
    _exit(3);
  }
  int nt = (int)r->o->threads;
  sk_eth *ths = calloc((size_t)nt, sizeof *ths);
  pthread_t *tid = calloc((size_t)nt, sizeof *tid);
  if (!ths || !tid)
    _exit(4);
  int started = 0;
  atomic_store(&p.threads_left, nt);
  pthread_t wtid;
  int have_watcher = pthread_create(&wtid, NULL, watcher_main, &p) == 0;
  for (int t = 0; t < nt; t++) {
    sk_eth_init(&ths[t], &p.e, t,
                mix64(((uint64_t)getpid() << 20) ^ (uint64_t)t ^
                      (uint64_t)dlc_now_us()));
    if (pthread_create(&tid[t], NULL, thread_main, &ths[t]) != 0) {
      atomic_fetch_add(&p.sh->ready, nt - t);
      atomic_fetch_sub(&p.threads_left, nt - t);
      break;
    }
    started++;
  }
  for (int t = 0; t < started; t++)
    pthread_join(tid[t], NULL);
  if (have_watcher)
    pthread_join(wtid, NULL);
  sk_engine_free(&p.e);
  free(ths);
  free(tid);
  _exit(0);
}
