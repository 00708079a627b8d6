/*
 * acquire.c -- acquiring the lock for "dlock NAME -- COMMAND": one attempt
 * first when -n or -v asks for it, then the whole wait as ONE blocking
 * call of the library (so a fair lock keeps its place in the queue) while
 * a watcher thread waits for the forwarded signals and cancels the wait
 * when one comes; and the message when the lock was not acquired (none
 * for -n unless -v: flock -n is silent on conflict, and so are we).
 */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

/* Waits for a forwarded signal while the main thread is blocked in the
 * library's wait; cancels that wait when one comes. */
typedef struct sigwatch {
  const sigset_t *set;
  dlock_client *c;
  atomic_int stop;
  atomic_int sig;
} sigwatch;

static void *sigwatch_main(void *arg) {
  sigwatch *w = arg;
  const struct timespec tick = {0, 50 * 1000000L}; /* to notice w->stop */
  while (!atomic_load(&w->stop)) {
    if (atomic_load(&w->sig)) {
      /* A cancel reaches only waits already in progress: one that came
       * before the main thread entered the library's wait (or before the
       * wait took its snapshot) is missed. So cancel again every tick
       * until the main thread's call has returned. */
      dlock_client_cancel_waits(w->c);
      nanosleep(&tick, NULL);
      continue;
    }
    int s = sigtimedwait(w->set, NULL, &tick);
    if (s > 0) {
      atomic_store(&w->sig, s);
      dlock_client_cancel_waits(w->c);
    }
  }
  return NULL;
}

/* Says that the lock was not acquired. -n is silent on conflict, as flock
 * -n is -- except when another kind of lock holds the name (a plain lock
 * where -s/-x was asked for, or the other way round): that is most likely
 * a mistake, and it is said unless -q. */
static void not_acquired(run_state *rs, long long start) {
  const cli_opts *o = rs->o;
  if (o->quiet)
    return;
  char who[512], other[96], waited[32];
  run_holder_of(rs, who, sizeof who, other, sizeof other);
  cli_fmt_secs(dlc_now_ms() - start, waited, sizeof waited);
  if (other[0]) {
    char how[64];
    if (o->wait_ms == 0)
      snprintf(how, sizeof how, "not acquired");
    else
      snprintf(how, sizeof how, "gave up after %s s", waited);
    cli_note(o,
             "lock '%s' is held as %s%s%s, another kind than %s (the kinds "
             "of one name exclude each other); %s",
             o->name, other, who[0] ? " by " : "", who,
             lk_kind_option(rs->lk.kind), how);
    return;
  }
  if (o->wait_ms == 0 && !o->verbose)
    return;
  if (o->wait_ms == 0) /* -n is silent on conflict, as flock -n is */
    cli_debug(o, "lock '%s' is held%s%s; not acquired", o->name,
              who[0] ? " by " : " elsewhere", who);
  else
    cli_note(o, "lock '%s' is held%s%s; gave up after %s s", o->name,
             who[0] ? " by " : " elsewhere", who, waited);
}

/* Says why the process gave up on a signal; its exit code. */
static int gave_up(const cli_opts *o, int sig, const char *when) {
  char nm[32];
  sig_name(sig, nm, sizeof nm);
  cli_debug(o, "got %s %s lock '%s': giving up", nm, when, o->name);
  return 128 + sig;
}

/* -n, -v: one attempt (a trylock never joins the queue). 1 held, 0 not
 * (*ex: the exit code), -1 go on waiting. */
static int try_once(run_state *rs, long long start, int *ex) {
  const cli_opts *o = rs->o;
  int rc = lk_timed(&rs->lk, 0, o->lease_ms);
  if (rc == 0)
    return 1;
  if (rc != DLOCK_EBUSY) {
    *ex = lk_error(o, rs->lk.kind, rc, "acquire");
    return 0;
  }
  if (o->wait_ms == 0) {
    not_acquired(rs, start);
    *ex = o->conflict_code;
    return 0;
  }
  char who[512], other[96];
  run_holder_of(rs, who, sizeof who, other, sizeof other);
  cli_debug(o, "waiting for lock '%s' (held%s%s%s%s)", o->name,
            other[0] ? " as " : "", other, who[0] ? " by " : " elsewhere", who);
  return -1;
}

/* The blocking wait, with the watcher thread; *sig: the signal that came
 * during it, or 0. */
static int wait_watched(run_state *rs, const sigset_t *fwd, long long left,
                        int *sig) {
  sigwatch w = {fwd, rs->c, 0, 0};
  pthread_t wt;
  int watching = pthread_create(&wt, NULL, sigwatch_main, &w) == 0;
  int rc = lk_timed(&rs->lk, left, rs->o->lease_ms);
  if (watching) {
    atomic_store(&w.stop, 1);
    pthread_join(wt, NULL);
  }
  *sig = atomic_load(&w.sig);
  return rc;
}

int run_acquire(run_state *rs, const sigset_t *fwd, long long *t0, int *ex) {
  const cli_opts *o = rs->o;
  long long start = dlc_now_ms();
  int sig = sig_pending(fwd);
  *ex = 0;
  if (sig) {
    *ex = gave_up(o, sig, "before acquiring");
    return 0;
  }
  *t0 = start;
  if (o->wait_ms == 0 || o->verbose) {
    int held = try_once(rs, start, ex);
    if (held >= 0)
      return held;
  }
  long long left = o->wait_ms;
  if (o->wait_ms > 0) {
    /* Counted from the start of dlock: connecting took some of it. */
    left = o->wait_ms - (dlc_now_ms() - rs->t_begin);
    if (left < 1)
      left = 1;
  }
  int rc = wait_watched(rs, fwd, left, &sig);
  if (sig && rc == 0) {
    /* Handed over just as the signal came: hold it, and let the caller
     * see the signal (and release) like one that came right after. */
    kill(getpid(), sig);
    return 1;
  }
  if (sig) {
    *ex = gave_up(o, sig, "while waiting for");
  } else if (rc == DLOCK_EBUSY || rc == DLOCK_ETIMEDOUT) {
    not_acquired(rs, start);
    *ex = o->conflict_code;
  } else if (rc != 0) {
    *ex = lk_error(o, rs->lk.kind, rc, "acquire");
  }
  return rc == 0 && !sig;
}
