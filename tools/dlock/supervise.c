/*
 * supervise.c -- the main loop while the command runs: it reads signals
 * through a signalfd and forwards them to the command's group, reaps the
 * command (and, dlock being a child subreaper, what it orphans), follows
 * job control, and reacts to a lost lock (the callback, the monitor, the
 * fixed lease's own timer): SIGTERM to the group, SIGKILL after
 * --kill-after, exit 75. Then the command's exit status becomes dlock's.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "run.h"

void report_loss(run_state *rs, sup *s, const char *reason) {
  const cli_opts *o = rs->o;
  if (!s->lost) {
    s->lost = 1;
    if (!s->done && s->pid > 0) { /* kill(-(-1)) would be init's */
      kill(-s->pid, SIGTERM);
      s->term_sent = 1;
      long long at = dlc_now_ms() + o->kill_after_ms;
      if (s->kill_at < 0 || at < s->kill_at)
        s->kill_at = at;
    }
  }
  if (reason && !s->lost_printed) {
    char g[32];
    cli_fmt_secs(o->kill_after_ms, g, sizeof g);
    if (s->term_sent)
      cli_err("lock '%s' lost: %s; sent SIGTERM to the command (SIGKILL "
              "after %s s)",
              o->name, reason, g);
    else
      cli_err("lock '%s' lost: %s", o->name, reason);
    s->lost_printed = 1;
  }
}

/* Reaps the command and, dlock being a child subreaper, whatever the
 * command orphaned (so that a dead member of its group does not linger as a
 * zombie that still counts as a member). */
static void reap(run_state *rs, sup *s) {
  for (int i = 0; i < 64; i++) {
    int st;
    pid_t r = waitpid(-1, &st, WNOHANG | (s->tty_fd >= 0 ? WUNTRACED : 0));
    if (r <= 0)
      return;
    if (r != s->pid || s->done)
      continue;
    if (!WIFSTOPPED(st)) {
      s->done = 1;
      s->status = st;
      continue;
    }
    /* Job control: the command was stopped (^Z). Give the terminal back
     * and stop dlock too so the shell sees the job stopped; on SIGCONT,
     * hand the terminal over again and continue the command. While dlock
     * is stopped nothing renews the lock. */
    take_tty_back(s);
    cli_debug(rs->o, "command stopped; stopping dlock too");
    kill(getpid(), SIGSTOP);
    if (tcgetpgrp(s->tty_fd) == getpgrp())
      tcsetpgrp(s->tty_fd, s->pid);
    kill(-s->pid, SIGCONT);
  }
}

void read_events(run_state *rs, sup *s) {
  char buf[64];
  ssize_t n;
  while ((n = read(rs->evt_rd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == 'L') {
        report_loss(rs, s, NULL);
      } else {
        char why[768];
        pthread_mutex_lock(&rs->mu);
        snprintf(why, sizeof why, "%s", rs->reason);
        pthread_mutex_unlock(&rs->mu);
        report_loss(rs, s, why);
      }
    }
  }
}

/* The smaller of a poll timeout (-1: none yet) and a remaining time. */
static long long until(long long timeout, long long rem) {
  if (rem < 0)
    rem = 0;
  return timeout < 0 || rem < timeout ? rem : timeout;
}

/* The poll timeout: the SIGKILL deadline, the fixed lease's end, and
 * polling the leftovers of the group once the command ended. */
static int next_timeout(const sup *s) {
  long long now = dlc_now_ms(), timeout = -1;
  if (s->kill_at >= 0)
    timeout = until(timeout, s->kill_at - now);
  if (s->lease_end >= 0 && !s->lost && !s->done)
    timeout = until(timeout, s->lease_end - now);
  if (s->done)
    timeout = until(timeout, 50);
  return timeout > 60000 ? 60000 : (int)timeout;
}

/* Every signal the signalfd holds: SIGCHLD reaps, others are forwarded
 * to the group (a terminating one starts the grace). */
static void read_signals(run_state *rs, sup *s, int sfd) {
  const cli_opts *o = rs->o;
  struct signalfd_siginfo si;
  while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    int sig = (int)si.ssi_signo;
    if (sig == SIGCHLD) {
      reap(rs, s);
      continue;
    }
    if (s->done)
      continue;
    char nm[32];
    sig_name(sig, nm, sizeof nm);
    cli_debug(o, "forwarding %s to the command", nm);
    kill(-s->pid, sig);
    if (sig_is_terminating(sig) && s->kill_at < 0)
      s->kill_at = dlc_now_ms() + o->kill_after_ms;
  }
}

/* The fixed lease's end and the grace's end. */
static void check_timers(run_state *rs, sup *s) {
  const cli_opts *o = rs->o;
  long long now = dlc_now_ms();
  if (s->lease_end >= 0 && now >= s->lease_end && !s->lost && !s->done) {
    char l[32], why[128];
    cli_fmt_secs(o->lease_ms, l, sizeof l);
    snprintf(why, sizeof why,
             "its fixed lease (-l %s) ran out while the command was still "
             "running",
             l);
    report_loss(rs, s, why);
  }
  if (s->kill_at >= 0 && now >= s->kill_at) {
    cli_debug(o, "command still running after the grace: SIGKILL");
    kill(-s->pid, SIGKILL);
    s->kill_at = -1;
  }
}

static void loop(run_state *rs, sup *s, int sfd) {
  for (;;) {
    /* The command ended. After a loss, what it left in its group gets the
     * rest of the grace, then SIGKILL. */
    if (s->done && (!s->lost || s->kill_at < 0 || kill(-s->pid, 0) != 0))
      return;
    struct pollfd pf[2] = {{sfd, POLLIN, 0}, {rs->evt_rd, POLLIN, 0}};
    if (poll(pf, 2, next_timeout(s)) < 0 && errno != EINTR)
      return;
    read_signals(rs, s, sfd);
    reap(rs, s); /* a SIGCHLD merged with an earlier one */
    read_events(rs, s);
    check_timers(rs, s);
  }
}

/* The command's end as an exit status: 128+N for a signal. */
static int exit_status(const cli_opts *o, int status) {
  char st[32];
  if (WIFSIGNALED(status))
    sig_name(WTERMSIG(status), st, sizeof st);
  else
    snprintf(st, sizeof st, "status %d", WEXITSTATUS(status));
  cli_debug(o, "command ended (%s)", st);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

int supervise(run_state *rs, sup *s, int sfd) {
  loop(rs, s, sfd);
  take_tty_back(s);
  if (!s->done) { /* poll failed: do not leave it running unprotected */
    kill(-s->pid, SIGKILL);
    int st = 0;
    while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR) {
    }
    s->status = st;
    s->done = 1;
  }
  return exit_status(rs->o, s->status);
}
