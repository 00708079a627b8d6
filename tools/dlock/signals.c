/*
 * signals.c -- the signals of "dlock NAME -- COMMAND": the sets (forwarded,
 * read by the main loop), blocking them in every thread from the start,
 * their names in messages, and taking a pending one. No handler ever
 * runs: signals are read synchronously (sigtimedwait, signalfd).
 */
#include <string.h>
#include <time.h>

#include "run.h"

static const int g_fwd_sigs[] = {SIGINT,  SIGTERM, SIGHUP,
                                 SIGQUIT, SIGUSR1, SIGUSR2};

void sigs_block(run_sigs *s) {
  /* SIGPIPE is blocked too (a dead Redis connection is an error, not a
   * death); SIGTTOU so that dlock may hand the terminal to the command
   * and take it back. */
  sigset_t all;
  sigemptyset(&s->fwd);
  for (size_t i = 0; i < sizeof g_fwd_sigs / sizeof g_fwd_sigs[0]; i++)
    sigaddset(&s->fwd, g_fwd_sigs[i]);
  s->loopset = s->fwd;
  sigaddset(&s->loopset, SIGCHLD);
  all = s->loopset;
  sigaddset(&all, SIGPIPE);
  sigaddset(&all, SIGTTOU);
  sigprocmask(SIG_BLOCK, &all, &s->orig);
  /* Signals ignored on entry (nohup, background jobs of a non-interactive
   * shell) stay ignored, for dlock and the command, as a shell would do.
   * SIGCHLD is the exception: dlock must see its child exit. */
  s->chld_ignored = 0;
  struct sigaction sa;
  if (sigaction(SIGCHLD, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) {
    s->chld_ignored = 1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &sa, NULL);
  }
}

void sig_name(int sig, char *buf, size_t len) {
  static const struct {
    int sig;
    const char *name;
  } names[] = {{SIGINT, "INT"},   {SIGTERM, "TERM"}, {SIGHUP, "HUP"},
               {SIGQUIT, "QUIT"}, {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"},
               {SIGKILL, "KILL"}, {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},
               {SIGSEGV, "SEGV"}, {SIGABRT, "ABRT"}, {SIGBUS, "BUS"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].sig == sig) {
      snprintf(buf, len, "SIG%s", names[i].name);
      return;
    }
  snprintf(buf, len, "signal %d", sig);
}

int sig_is_terminating(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

int sig_pending(const sigset_t *set) {
  struct timespec zero = {0, 0};
  int s = sigtimedwait(set, NULL, &zero);
  return s > 0 ? s : 0;
}
