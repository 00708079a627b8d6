/* watch.c -- the workers of one run from the parent's side: forking them,
 * the common start signal, the progress line, --kill-holder, the stall
 * and deadline checks, and stopping them in bounded time. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seckill.h"

static void progress(const sk_opts *o, const sk_strategy *s, long long done,
                     long long total, double secs, const char *state) {
  if (!o->tty)
    return;
  fprintf(stderr, "\r\033[K  %-13s %7lld/%lld requests  %5.1f s  %s", s->name,
          done, total, secs, state);
  fflush(stderr);
}

static void kill_all(const sk_procs *ps, int sig) {
  for (int i = 0; i < ps->n; i++)
    if (ps->pid[i] > 0)
      kill(ps->pid[i], sig);
}

/* Reaps what has exited; returns how many are still running. */
static int reap(sk_procs *ps) {
  int alive = 0;
  for (int i = 0; i < ps->n; i++) {
    if (ps->pid[i] <= 0)
      continue;
    int st;
    pid_t w = waitpid(ps->pid[i], &st, WNOHANG);
    if (w == ps->pid[i]) {
      ps->status[i] = st;
      ps->pid[i] = -ps->pid[i]; /* keep the number, mark reaped */
    } else {
      alive++;
    }
  }
  return alive;
}

void sk_fork_workers(const sk_run *r, redisContext *pc, sk_procs *ps,
                     sk_result *res) {
  memset(ps, 0, sizeof *ps);
  fflush(stdout);
  fflush(stderr);
  for (int w = 0; w < (int)r->o->procs && w < SK_MAX_PROCS; w++) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      redisFree(pc); /* the parent's connection is not ours */
      sk_worker_main(r, w);
    }
    if (pid < 0) {
      snprintf(res->first_error, sizeof res->first_error, "fork: %s",
               strerror(errno));
      break;
    }
    ps->pid[w] = pid;
    ps->n++;
  }
}

/* Every thread connected (bounded wait), then all go at once. */
static void start_together(const sk_run *r, sk_procs *ps) {
  sk_shared *sh = r->sh;
  int need = ps->n * (int)r->o->threads;
  for (int i = 0; i < 1500 && atomic_load(&sh->ready) < need; i++) {
    if (reap(ps) == 0)
      break;
    dlc_sleep_us(10000);
  }
  sh->go_us = dlc_now_us();
  atomic_store(&sh->last_end_us, sh->go_us);
  atomic_store(&sh->go, 1);
}

/* --kill-holder: worker 0 waits at its kill point for this. */
static void kill_victim(const sk_run *r, sk_procs *ps, sk_result *res,
                        const char **state) {
  if (!r->o->kill_holder || res->victim_killed || ps->n == 0 ||
      !atomic_load(&r->sh->victim_at_killpoint))
    return;
  kill(ps->pid[0] > 0 ? ps->pid[0] : -ps->pid[0], SIGKILL);
  res->victim_killed = 1;
  atomic_store(&r->sh->victim_killed, 1);
  *state = "worker 0 killed while holding";
}

/* Until every worker is gone (0), or nothing finished for the stall time
 * (1) or the deadline passed (2). */
static int watch_loop(const sk_run *r, sk_procs *ps, sk_result *res) {
  const sk_opts *o = r->o;
  sk_shared *sh = r->sh;
  long long stall_ms = sk_stall_ms(o, r->s), next_progress = 0;
  const char *state = "running";
  for (;;) {
    long long now = dlc_now_us();
    int alive = reap(ps);
    long long done = atomic_load(&sh->done);
    if (alive == 0)
      return 0;
    kill_victim(r, ps, res, &state);
    long long idle_ms = (now - atomic_load(&sh->last_end_us)) / 1000;
    long long run_ms = (now - sh->go_us) / 1000;
    if (done < o->requests && idle_ms >= stall_ms)
      return 1; /* nobody finished anything for stall_ms: stuck */
    if (run_ms >= o->deadline_ms)
      return 2;
    if (now >= next_progress) {
      progress(o, r->s, done, o->requests, (double)run_ms / 1000.0, state);
      next_progress = now + 100000;
    }
    dlc_sleep_us(5000);
  }
}

/* A stopped run: waiting threads notice the abort within a spin (ms) or
 * a cancel (20 ms); a thread in the middle of its work finishes it.
 * Bounded, then SIGKILL. */
static void stop_workers(const sk_run *r, sk_procs *ps, sk_result *res,
                         long long t_stop) {
  progress(r->o, r->s, atomic_load(&r->sh->done), r->o->requests,
           (double)(t_stop - r->sh->go_us) / 1e6,
           res->stopped == 1 ? "stuck: stopping" : "deadline: stopping");
  atomic_store(&r->sh->abort, 1);
  for (int i = 0; i < 500 && reap(ps) > 0; i++)
    dlc_sleep_us(10000);
  if (reap(ps) > 0) {
    kill_all(ps, SIGKILL);
    for (int i = 0; i < 500 && reap(ps) > 0; i++)
      dlc_sleep_us(10000);
  }
}

long long sk_watch_workers(const sk_run *r, sk_procs *ps, sk_result *res) {
  start_together(r, ps);
  res->ran = 1;
  res->stopped = watch_loop(r, ps, res);
  long long t_stop = dlc_now_us();
  if (res->stopped)
    stop_workers(r, ps, res, t_stop);
  if (r->o->tty)
    fprintf(stderr, "\r\033[K");
  return t_stop;
}
