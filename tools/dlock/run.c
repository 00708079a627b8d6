/*
 * run.c -- "dlock NAME -- COMMAND": the steps in order (signals, open the
 * lock, acquire, spawn the command, supervise it, exit status, release and
 * report); each step lives in the file run.h names.
 *
 * SIGNALS. Every signal dlock reacts to is blocked in all its threads from
 * the start (the client's background threads inherit the mask), and read
 * synchronously: while waiting for the lock by a watcher thread with
 * sigtimedwait, while the command runs through a signalfd. No handler ever
 * runs, so nothing is async-signal-unsafe, and SIGCHLD is never lost to a
 * library thread.
 *
 * WAITING. The whole wait is ONE blocking call of the library (so a fair
 * lock keeps its place in the queue). Meanwhile a watcher thread waits for
 * SIGINT/SIGTERM/SIGHUP (and QUIT, USR1, USR2); when one comes it calls
 * dlock_client_cancel_waits(), which makes the wait return DLOCK_ECANCELED
 * after leaving the server-side queue -- or DLOCK_OK if the lock was handed
 * over at that very moment, and then dlock releases it properly. So a
 * signal ends the wait at once and never leaves a lock behind.
 *
 * RUNNING. The command is forked from the main thread (the parent-death
 * signal is tied to the forking thread), in its own process group, with
 * PR_SET_PDEATHSIG = SIGTERM, the original signal mask, and without the
 * Redis connections the client opened (they are not close-on-exec). Between
 * fork and exec the child uses async-signal-safe calls only: PATH is
 * resolved, argv/envp and the fd list are built before the fork. An exec
 * failure comes back over a close-on-exec pipe (126/127).
 *
 * LOSS. Watchdog leases: the client's on_lock_lost callback writes to a
 * pipe (the main loop SIGTERMs the group at once) and wakes the monitor
 * thread, which asks Redis what happened, for the message. Fixed leases
 * (-l): the main loop's own timer fires when the lease, counted from the
 * start of the acquiring call (a lower bound of the server's start), runs
 * out; the monitor polls the holders every third of the lease (0.1..10 s)
 * to notice a deletion early. Either way: SIGTERM to the group, SIGKILL
 * after --kill-after, exit 75.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "run.h"

/* The client (lease-aware timeouts, the loss callback), the lock object,
 * and the holder field it will be held under. 0 or the exit code. */
static int open_lock(run_state *rs, long long lease) {
  const cli_opts *o = rs->o;
  /* -w SECS bounds the whole call, connecting included (-n: one attempt
   * at the lock, after the usual connection policy). */
  long long deadline = o->wait_ms > 0 ? rs->t_begin + o->wait_ms : -1;
  int ex = cli_connect(o, lease, deadline, mon_on_lost, rs, &rs->c);
  if (ex)
    return ex;
  int rc = lk_new(rs->c, o->name, &rs->lk);
  if (rc)
    return lk_error(o, rs->lk.kind, rc, "create");
  rc = lk_owner(rs->c, o->name, rs->lk.kind, rs->owner, sizeof rs->owner);
  if (rc)
    return lk_error(o, rs->lk.kind, rc, "use");
  return 0;
}

static void say_acquired(const run_state *rs, long long t_start,
                         long long lease) {
  const cli_opts *o = rs->o;
  char w[32], l[32];
  cli_fmt_secs(dlc_now_ms() - t_start, w, sizeof w);
  cli_fmt_secs(lease, l, sizeof l);
  if (rs->lk.kind == K_SEM) /* DLOCK_OWNER is the permit's id */
    cli_debug(o, "acquired permit %s of '%s' (--sem %lld) after %s s (%s %s s)",
              rs->lk.permit, o->name, o->sem_n, w,
              o->lease_ms > 0 ? "fixed lease" : "watchdog lease", l);
  else
    cli_debug(o, "acquired lock '%s' as %s after %s s (%s %s s)", o->name,
              rs->owner, w, o->lease_ms > 0 ? "fixed lease" : "watchdog lease",
              l);
}

/* DLOCK_NAME, DLOCK_OWNER and (--fence) DLOCK_TOKEN for the command. */
static int command_env(run_state *rs, plan *p) {
  const cli_opts *o = rs->o;
  char token[32] = "";
  if (rs->lk.kind == K_FENCED) {
    uint64_t tok = 0;
    int rc = dlock_mutex_token(rs->lk.m, &tok);
    if (rc)
      return lk_error(o, rs->lk.kind, rc, "read the fencing token of");
    snprintf(token, sizeof token, "%" PRIu64, tok);
  }
  /* --sem: the command's DLOCK_OWNER is its permit id. */
  const char *owner = rs->lk.kind == K_SEM ? rs->lk.permit : rs->owner;
  if (plan_env(p, o->name, owner, token[0] ? token : NULL) != 0) {
    cli_err("out of memory");
    return CLI_EX_SOFT;
  }
  return 0;
}

/* With the lock held: the monitor, the command, its supervision. Returns
 * the command's exit status as dlock's, or the exit code of a failure. */
static int run_command(run_state *rs, const run_sigs *sg, plan *p, sup *s) {
  int ex = command_env(rs, p);
  if (ex)
    return ex;
  mon_start(rs, s->lease_end);
  int sfd = signalfd(-1, &sg->loopset, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    cli_err("signalfd/pipe: %s", strerror(errno));
    return CLI_EX_SOFT;
  }
  /* The last moment before the fork: a hold whose local deadline (or
   * fixed lease) has passed since the acquisition -- dlock stopped or
   * starved meanwhile -- starts no command. */
  long long left = -1;
  if (lk_validity(&rs->lk, &left) == DLOCK_ELOST ||
      (s->lease_end >= 0 && dlc_now_ms() >= s->lease_end)) {
    close(sfd);
    s->lost = 1;
    s->lost_printed = 1;
    cli_err("lock '%s' lost before the command started: its lease ran out "
            "(dlock was stopped or starved); the command was not run",
            rs->o->name);
    return CLI_EX_LOST;
  }
  ex = spawn_command(sg, p, s);
  if (ex == 0) {
    cli_debug(rs->o, "started '%s' (pid %d)", p->argv[0], (int)s->pid);
    ex = supervise(rs, s, sfd);
  }
  close(sfd);
  return ex;
}

/* Releases the lock and says what happened to it; a lost lock makes the
 * exit code 75. */
static int release_and_report(run_state *rs, sup *s, long long lease, int ex) {
  const cli_opts *o = rs->o;
  int rc = lk_unlock(&rs->lk);
  if (rc == 0) {
    cli_debug(o, "released lock '%s'", o->name);
  } else if (rc == DLOCK_ELOST) {
    if (!s->lost)
      report_loss(rs, s,
                  "found at release: it expired, was deleted or was taken "
                  "while the command ran");
    else if (!s->lost_printed) {
      /* The library's message says which: the key found gone, or
       * renewals that kept failing until the lease ran out. */
      const char *why = strstr(dlock_last_error(), "while held: ");
      report_loss(rs, s, why ? why + 12 : "renewal found it gone");
    }
  } else if (!s->lost) {
    char det[1024], l[32];
    cli_detail(cli_url(o), det, sizeof det);
    cli_fmt_secs(lease, l, sizeof l);
    cli_note(o,
             "could not release lock '%s' (%s: %s); it expires within its "
             "%s s lease",
             o->name, dlock_err_name(rc), det, l);
  }
  if (!s->lost)
    return ex;
  if (!s->lost_printed)
    report_loss(rs, s, "renewal found it gone or Redis unreachable");
  return CLI_EX_LOST;
}

/* Opens, acquires, runs; the lock is released by the caller when *held. */
static int run_locked(run_state *rs, const run_sigs *sg, plan *p, sup *s,
                      int *held) {
  const cli_opts *o = rs->o;
  long long lease = o->lease_ms > 0 ? o->lease_ms : o->watchdog_ms;
  int ex = mon_init(rs);
  if (ex == 0)
    ex = open_lock(rs, lease);
  if (ex)
    return ex;
  long long t0 = 0, t_start = dlc_now_ms();
  if (!(*held = run_acquire(rs, &sg->fwd, &t0, &ex)))
    return ex;
  say_acquired(rs, t_start, lease);
  if (o->lease_ms > 0)
    s->lease_end = t0 + o->lease_ms;
  int sig = sig_pending(&sg->fwd);
  if (sig)
    return 128 + sig;
  return run_command(rs, sg, p, s);
}

int cli_run(const cli_opts *o) {
  run_state rs = {.o = o,
                  .evt_rd = -1,
                  .evt_wr = -1,
                  .lease_end = -1,
                  .t_begin = dlc_now_ms()};
  rs.lk.kind = lk_kind(o);
  rs.lk.sem_n = o->sem_n;
  run_sigs sg;
  sigs_block(&sg);
  plan p;
  int ex = plan_init(o, &p);
  if (ex) {
    plan_free(&p);
    return ex;
  }
  sup s = {.pid = -1, .tty_fd = -1, .kill_at = -1, .lease_end = -1};
  int held = 0;
  ex = run_locked(&rs, &sg, &p, &s, &held);
  mon_stop(&rs);
  if (s.pid > 0)
    read_events(&rs, &s);
  if (held)
    ex = release_and_report(&rs, &s,
                            o->lease_ms > 0 ? o->lease_ms : o->watchdog_ms, ex);
  lk_free(&rs.lk);
  dlock_client_free(rs.c);
  if (s.tty_fd >= 0)
    close(s.tty_fd);
  mon_destroy(&rs);
  plan_free(&p);
  return ex;
}
