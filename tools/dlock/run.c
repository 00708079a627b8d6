/*
 * run.c -- "dlock NAME -- COMMAND": acquire, run the command, supervise it,
 * release.
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* ---- lock kinds ---------------------------------------------------------- */

enum { K_MUTEX, K_FAIR, K_FENCED, K_READ, K_WRITE };

typedef struct lockobj {
  int kind;
  dlock_mutex *m;
#ifdef DLOCK_CLI_HAVE_RWLOCK
  dlock_rwlock *rw;
#endif
} lockobj;

static const char *kind_option(int kind) {
  switch (kind) {
  case K_FAIR:
    return "--fair";
  case K_FENCED:
    return "--fence";
  case K_READ:
    return "-s/--shared";
  case K_WRITE:
    return "-x/--exclusive";
  default:
    return "the plain lock";
  }
}

static int lk_new(dlock_client *c, const char *name, lockobj *lk) {
  switch (lk->kind) {
  case K_FAIR:
    return dlock_mutex_new_fair(c, name, &lk->m);
  case K_FENCED:
    return dlock_mutex_new_fenced(c, name, &lk->m);
  case K_READ:
  case K_WRITE:
#ifdef DLOCK_CLI_HAVE_RWLOCK
    return dlock_rwlock_new(c, name, &lk->rw);
#else
    return DLOCK_ENOTSUP;
#endif
  default:
    return dlock_mutex_new(c, name, &lk->m);
  }
}

static int lk_timed(lockobj *lk, long long wait_ms, long long lease_ms) {
#ifdef DLOCK_CLI_HAVE_RWLOCK
  if (lk->kind == K_READ)
    return dlock_rwlock_timedrdlock(lk->rw, wait_ms, lease_ms);
  if (lk->kind == K_WRITE)
    return dlock_rwlock_timedwrlock(lk->rw, wait_ms, lease_ms);
#endif
  return dlock_mutex_timedlock(lk->m, wait_ms, lease_ms);
}

static int lk_unlock(lockobj *lk) {
#ifdef DLOCK_CLI_HAVE_RWLOCK
  if (lk->kind == K_READ || lk->kind == K_WRITE)
    return dlock_rwlock_unlock(lk->rw);
#endif
  return dlock_mutex_unlock(lk->m);
}

static void lk_free(lockobj *lk) {
#ifdef DLOCK_CLI_HAVE_RWLOCK
  dlock_rwlock_free(lk->rw);
  lk->rw = NULL;
#endif
  dlock_mutex_free(lk->m);
  lk->m = NULL;
}

/* ---- state shared with the callback and the monitor thread --------------- */

typedef struct run_state {
  const cli_opts *o;
  dlock_client *c;
  lockobj lk;
  char owner[128]; /* holder field of the main thread */
  int evt_rd, evt_wr;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t mon;
  int mon_started;
  int mon_stop;  /* under mu */
  int mon_probe; /* under mu: the callback reported a loss */
  long long poll_ms;
  long long lease_end; /* fixed lease (-l): when it runs out; else -1 */
  char reason[768];    /* under mu */
  int reason_ready;    /* under mu */
} run_state;

static void post(run_state *rs, char what) {
  ssize_t w;
  do {
    w = write(rs->evt_wr, &what, 1);
  } while (w < 0 && errno == EINTR);
}

/* on_lock_lost: runs on the client's watchdog thread; must not block. */
static void on_lost(const char *name, void *arg) {
  (void)name;
  run_state *rs = arg;
  pthread_mutex_lock(&rs->mu);
  rs->mon_probe = 1;
  pthread_cond_signal(&rs->cv);
  pthread_mutex_unlock(&rs->mu);
  post(rs, 'L');
}

static int is_mine(const dlock_status *st, const char *owner) {
  size_t n = strlen(owner);
  for (size_t i = 0; i < st->n_holders; i++) {
    const char *h = st->holders[i].owner;
    if (strncmp(h, owner, n) == 0 && (h[n] == '\0' || h[n] == ':'))
      return 1;
  }
  return 0;
}

static void *monitor_main(void *arg) {
  run_state *rs = arg;
  const cli_opts *o = rs->o;
  char lease[32];
  cli_fmt_secs(o->lease_ms > 0 ? o->lease_ms : o->watchdog_ms, lease,
               sizeof lease);
  pthread_mutex_lock(&rs->mu);
  for (;;) {
    if (!rs->mon_stop && !rs->mon_probe) {
      if (rs->poll_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(rs->poll_ms / 1000);
        ts.tv_nsec += (long)(rs->poll_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rs->cv, &rs->mu, &ts);
      } else {
        pthread_cond_wait(&rs->cv, &rs->mu);
      }
    }
    if (rs->mon_stop && !rs->mon_probe)
      break;
    int probe = rs->mon_probe;
    rs->mon_probe = 0;
    if (!probe && rs->poll_ms <= 0)
      continue;
    pthread_mutex_unlock(&rs->mu);

    dlock_status st;
    int rc = dlock_status_query(rs->c, o->name, &st);
    char det[1024] = "", why[768] = "";
    if (rc)
      cli_detail(cli_url(o), det, sizeof det);
    int mine = rc == 0 && is_mine(&st, rs->owner);
    if (rc == 0 && !mine) {
      if (!st.locked && rs->lease_end >= 0 &&
          cli_now_ms() >= rs->lease_end - 50)
        /* Noticed by this poll before the main loop's timer. */
        snprintf(why, sizeof why,
                 "its fixed lease (-l %s) ran out while the command was "
                 "still running",
                 lease);
      else if (!st.locked)
        snprintf(why, sizeof why,
                 "its key is gone (deleted, force-unlocked or expired)");
      else
        snprintf(why, sizeof why, "it is now held by %s",
                 st.n_holders ? st.holders[0].owner : "another client");
    } else if (probe && rc == DLOCK_ECONN) {
      snprintf(why, sizeof why,
               "Redis was unreachable for longer than the %s s lease (%.300s)",
               lease, det);
    } else if (probe && rc) {
      snprintf(why, sizeof why,
               "renewal failed until the %s s lease ran out "
               "(%.300s)",
               lease, det);
    } else if (probe) {
      snprintf(why, sizeof why,
               "renewals failed until the %s s lease ran out (Redis slow "
               "or unreachable)",
               lease);
    }
    if (rc == 0)
      dlock_status_clear(&st);

    pthread_mutex_lock(&rs->mu);
    if (why[0]) {
      snprintf(rs->reason, sizeof rs->reason, "%s", why);
      rs->reason_ready = 1;
      post(rs, probe ? 'R' : 'D');
      break; /* one report is all the main loop needs */
    }
  }
  pthread_mutex_unlock(&rs->mu);
  return NULL;
}

/* ---- the command ----------------------------------------------------------
 */

typedef struct plan {
  char **argv; /* exec argv (borrowed strings) */
  char *sh_argv[4];
  char **cands; /* absolute/relative paths to try, owned */
  size_t ncands;
  char **envp; /* owned array; our three entries owned too */
  char *env_own[3];
  int *close_fds; /* fds the child closes (the client's sockets etc.) */
  size_t nclose;
  int *initial; /* fds open when dlock started */
  size_t ninitial;
  int initial_ok;
} plan;

static void plan_free(plan *p) {
  for (size_t i = 0; i < p->ncands; i++)
    free(p->cands[i]);
  free(p->cands);
  free(p->envp);
  for (int i = 0; i < 3; i++)
    free(p->env_own[i]);
  free(p->close_fds);
  free(p->initial);
  memset(p, 0, sizeof *p);
}

/* Lists the open fds (sorted ascending by readdir order is not promised,
 * so callers only test membership). Returns 0 or -1. */
static int list_fds(int **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  size_t cap = 0;
  struct dirent *e;
  int self = dirfd(d);
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    int fd = atoi(e->d_name);
    if (fd == self)
      continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      int *np = realloc(*out, nc * sizeof *np);
      if (!np) {
        closedir(d);
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
      }
      *out = np;
      cap = nc;
    }
    (*out)[(*n)++] = fd;
  }
  closedir(d);
  return 0;
}

static int in_list(const int *l, size_t n, int fd) {
  for (size_t i = 0; i < n; i++)
    if (l[i] == fd)
      return 1;
  return 0;
}

/* Resolves the command like execvp (PATH, default "/bin:/usr/bin").
 * Returns 0, or the exit code after printing why (126/127, or 70). */
static int plan_resolve(const cli_opts *o, plan *p) {
  if (o->shell_cmd) {
    p->sh_argv[0] = (char *)"sh";
    p->sh_argv[1] = (char *)"-c";
    p->sh_argv[2] = (char *)o->shell_cmd;
    p->sh_argv[3] = NULL;
    p->argv = p->sh_argv;
  } else {
    p->argv = o->argv;
  }
  const char *file = o->shell_cmd ? "/bin/sh" : p->argv[0];
  if (!*file) {
    cli_err("cannot run '': empty command name");
    return CLI_EX_NOTFOUND;
  }
  if (strchr(file, '/')) {
    p->cands = calloc(1, sizeof *p->cands);
    if (!p->cands || !(p->cands[0] = strdup(file)))
      goto oom;
    p->ncands = 1;
  } else {
    const char *path = getenv("PATH");
    if (!path)
      path = "/bin:/usr/bin";
    size_t parts = 1;
    for (const char *s = path; *s; s++)
      parts += *s == ':';
    p->cands = calloc(parts, sizeof *p->cands);
    if (!p->cands)
      goto oom;
    const char *s = path;
    for (;;) {
      size_t n = strcspn(s, ":");
      size_t len = (n ? n : 1) + 1 + strlen(file) + 1;
      char *c = malloc(len);
      if (!c)
        goto oom;
      snprintf(c, len, "%.*s/%s", n ? (int)n : 1, n ? s : ".", file);
      p->cands[p->ncands++] = c;
      if (!s[n])
        break;
      s += n + 1;
    }
  }
  /* Fail before taking the lock when the command cannot be found at all. */
  int exists = 0;
  for (size_t i = 0; i < p->ncands; i++) {
    if (access(p->cands[i], X_OK) == 0)
      return 0;
    exists |= access(p->cands[i], F_OK) == 0;
  }
  if (exists) {
    cli_err("cannot run '%s': %s", file, strerror(EACCES));
    return CLI_EX_NOEXEC;
  }
  cli_err("cannot run '%s': command not found", file);
  return CLI_EX_NOTFOUND;
oom:
  cli_err("out of memory");
  return CLI_EX_SOFT;
}

static int plan_env(plan *p, const char *name, const char *owner,
                    const char *token) {
  size_t n = 0;
  for (char **e = environ; *e; e++)
    n++;
  p->envp = calloc(n + 4, sizeof *p->envp);
  if (!p->envp)
    return -1;
  size_t k = 0;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "DLOCK_NAME=", 11) && strncmp(*e, "DLOCK_OWNER=", 12) &&
        strncmp(*e, "DLOCK_TOKEN=", 12))
      p->envp[k++] = *e;
  const char *keys[3] = {"DLOCK_NAME", "DLOCK_OWNER", "DLOCK_TOKEN"};
  const char *vals[3] = {name, owner, token};
  for (int i = 0; i < 3; i++) {
    if (!vals[i])
      continue;
    size_t len = strlen(keys[i]) + 1 + strlen(vals[i]) + 1;
    if (!(p->env_own[i] = malloc(len)))
      return -1;
    snprintf(p->env_own[i], len, "%s=%s", keys[i], vals[i]);
    p->envp[k++] = p->env_own[i];
  }
  p->envp[k] = NULL;
  return 0;
}

/* The fds opened since dlock started (client sockets, our pipes): the
 * child closes them. err_fd stays (close-on-exec). */
static void plan_fds(plan *p, int err_fd) {
  int *now = NULL;
  size_t n = 0;
  if (!p->initial_ok || list_fds(&now, &n) != 0)
    return;
  p->close_fds = calloc(n ? n : 1, sizeof *p->close_fds);
  if (p->close_fds)
    for (size_t i = 0; i < n; i++)
      if (now[i] > 2 && now[i] != err_fd &&
          !in_list(p->initial, p->ninitial, now[i]))
        p->close_fds[p->nclose++] = now[i];
  free(now);
}

/* In the child: async-signal-safe calls only. */
static void child_exec(const plan *p, int err_fd, pid_t parent, int tty_fd,
                       const sigset_t *orig_mask, int chld_ignored) {
  setpgid(0, 0);
  if (tty_fd >= 0)
    tcsetpgrp(tty_fd, getpid()); /* SIGTTOU is still blocked here */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent)
    _exit(CLI_EX_LOST); /* dlock is already gone: never run unprotected */
  for (size_t i = 0; i < p->nclose; i++)
    close(p->close_fds[i]);
  if (chld_ignored) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGCHLD, &ign, NULL);
  }
  sigprocmask(SIG_SETMASK, orig_mask, NULL);
  int err = ENOENT, eacces = 0;
  for (size_t i = 0; i < p->ncands; i++) {
    execve(p->cands[i], p->argv, p->envp);
    err = errno;
    if (err == EACCES)
      eacces = 1;
    else if (err != ENOENT && err != ENOTDIR && err != ELOOP &&
             err != ENAMETOOLONG)
      break;
  }
  if (eacces && (err == ENOENT || err == ENOTDIR))
    err = EACCES;
  ssize_t w = write(err_fd, &err, sizeof err);
  (void)w;
  _exit(CLI_EX_NOTFOUND);
}

/* ---- the run ------------------------------------------------------------- */

static void sig_name(int sig, char *buf, size_t len) {
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

static const int g_fwd_sigs[] = {SIGINT,  SIGTERM, SIGHUP,
                                 SIGQUIT, SIGUSR1, SIGUSR2};
#define N_FWD (sizeof g_fwd_sigs / sizeof g_fwd_sigs[0])

static int is_terminating(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

static int pending_signal(const sigset_t *set) {
  struct timespec zero = {0, 0};
  int s = sigtimedwait(set, NULL, &zero);
  return s > 0 ? s : 0;
}

static int lock_error(const cli_opts *o, int kind, int rc, const char *what) {
  if (rc == DLOCK_ENOTSUP) {
    cli_err("%s is not supported by this build of libdlock", kind_option(kind));
    return CLI_EX_USAGE;
  }
  char det[1024], red[512];
  cli_detail(cli_url(o), det, sizeof det);
  cli_redact_url(cli_url(o), red, sizeof red);
  if (rc == DLOCK_ECONN)
    cli_err("cannot %s lock '%s': Redis at %s unreachable: %s", what, o->name,
            red, det);
  else
    cli_err("cannot %s lock '%s': %s (%s)", what, o->name, det,
            dlock_err_name(rc));
  return cli_exit_code(rc);
}

/* The holder to name in messages ("" if unknown). */
static void holder_of(run_state *rs, char *buf, size_t len) {
  dlock_status st;
  buf[0] = '\0';
  if (dlock_status_query(rs->c, rs->o->name, &st) != 0)
    return;
  if (st.n_holders)
    snprintf(buf, len, "%s", st.holders[0].owner);
  else if (st.locked)
    snprintf(buf, len, "a client of another kind");
  dlock_status_clear(&st);
}

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

static void report_not_acquired(run_state *rs, long long start) {
  const cli_opts *o = rs->o;
  if (o->quiet)
    return;
  char who[160], waited[32];
  holder_of(rs, who, sizeof who);
  cli_fmt_secs(cli_now_ms() - start, waited, sizeof waited);
  if (o->wait_ms == 0)
    cli_note(o, "lock '%s' is held%s%s; not acquired", o->name,
             who[0] ? " by " : " elsewhere", who);
  else
    cli_note(o, "lock '%s' is held%s%s; gave up after %s s", o->name,
             who[0] ? " by " : " elsewhere", who, waited);
}

/* Acquires in one blocking call (see WAITING above). Returns 0 when held,
 * else the exit code. *t0 gets the start of the successful call. A signal
 * that arrives as the lock is acquired is queued again for the caller,
 * which then releases the lock and exits 128+N. */
static int acquire(run_state *rs, const sigset_t *fwd, long long *t0) {
  const cli_opts *o = rs->o;
  long long start = cli_now_ms();
  int sig = pending_signal(fwd);
  if (sig) {
    char nm[32];
    sig_name(sig, nm, sizeof nm);
    cli_debug(o, "got %s before acquiring lock '%s': giving up", nm, o->name);
    return 128 + sig;
  }
  *t0 = start;
  int rc;
  if (o->wait_ms == 0 || o->verbose) {
    /* One attempt first: -n needs no more; -v wants to say who holds it
     * before the wait. A trylock never joins the queue. */
    rc = lk_timed(&rs->lk, 0, o->lease_ms);
    if (rc == 0)
      return 0;
    if (rc != DLOCK_EBUSY)
      return lock_error(o, rs->lk.kind, rc, "acquire");
    if (o->wait_ms == 0) {
      report_not_acquired(rs, start);
      return o->conflict_code;
    }
    char who[160];
    holder_of(rs, who, sizeof who);
    cli_debug(o, "waiting for lock '%s' (held%s%s)", o->name,
              who[0] ? " by " : " elsewhere", who);
  }
  long long left = o->wait_ms;
  if (o->wait_ms > 0) {
    left = o->wait_ms - (cli_now_ms() - start);
    if (left < 1)
      left = 1;
  }
  sigwatch w = {fwd, rs->c, 0, 0};
  pthread_t wt;
  int watching = pthread_create(&wt, NULL, sigwatch_main, &w) == 0;
  rc = lk_timed(&rs->lk, left, o->lease_ms);
  if (watching) {
    atomic_store(&w.stop, 1);
    pthread_join(wt, NULL);
  }
  sig = atomic_load(&w.sig);
  if (sig) {
    char nm[32];
    sig_name(sig, nm, sizeof nm);
    if (rc == 0) {
      /* Handed over just as the signal came: hold it, and let the caller
       * see the signal (and release) like one that came right after. */
      kill(getpid(), sig);
      return 0;
    }
    cli_debug(o, "got %s while waiting for lock '%s': giving up", nm, o->name);
    return 128 + sig;
  }
  if (rc == 0)
    return 0;
  if (rc == DLOCK_EBUSY || rc == DLOCK_ETIMEDOUT) {
    report_not_acquired(rs, start);
    return o->conflict_code;
  }
  return lock_error(o, rs->lk.kind, rc, "acquire");
}

typedef struct sup {
  pid_t pid;
  int tty_fd; /* >= 0: the command owns the terminal while it runs */
  int done, status;
  int lost, lost_printed, term_sent;
  long long kill_at, lease_end;
} sup;

static void report_loss(run_state *rs, sup *s, const char *reason) {
  const cli_opts *o = rs->o;
  if (!s->lost) {
    s->lost = 1;
    if (!s->done) {
      kill(-s->pid, SIGTERM);
      s->term_sent = 1;
      long long at = cli_now_ms() + o->kill_after_ms;
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

static void take_tty_back(sup *s) {
  if (s->tty_fd >= 0)
    tcsetpgrp(s->tty_fd, getpgrp());
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

static void read_events(run_state *rs, sup *s) {
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

static void supervise(run_state *rs, sup *s, int sfd) {
  const cli_opts *o = rs->o;
  for (;;) {
    if (s->done) {
      /* The command ended. After a loss, what it left in its group gets
       * the rest of the grace, then SIGKILL. */
      if (!s->lost || s->kill_at < 0 || kill(-s->pid, 0) != 0)
        break;
    }
    long long now = cli_now_ms(), timeout = -1;
    if (s->kill_at >= 0)
      timeout = until(timeout, s->kill_at - now);
    if (s->lease_end >= 0 && !s->lost && !s->done)
      timeout = until(timeout, s->lease_end - now);
    if (s->done)
      timeout = until(timeout, 50); /* polling the leftovers of the group */
    struct pollfd pf[2] = {{sfd, POLLIN, 0}, {rs->evt_rd, POLLIN, 0}};
    int pr = poll(pf, 2, timeout > 60000 ? 60000 : (int)timeout);
    if (pr < 0 && errno != EINTR)
      break;
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
      if (is_terminating(sig) && s->kill_at < 0)
        s->kill_at = cli_now_ms() + o->kill_after_ms;
    }
    reap(rs, s); /* a SIGCHLD merged with an earlier one */
    read_events(rs, s);
    now = cli_now_ms();
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
}

static void init_sync(run_state *rs) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rs->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&rs->mu, NULL);
}

int cli_run(const cli_opts *o) {
  run_state rs;
  memset(&rs, 0, sizeof rs);
  rs.o = o;
  rs.evt_rd = rs.evt_wr = -1;
  rs.lk.kind = o->fair        ? K_FAIR
               : o->fence     ? K_FENCED
               : o->shared    ? K_READ
               : o->exclusive ? K_WRITE
                              : K_MUTEX;
#ifndef DLOCK_CLI_HAVE_RWLOCK
  if (rs.lk.kind == K_READ || rs.lk.kind == K_WRITE) {
    cli_err("%s is not supported by this build of libdlock (no read-write "
            "lock)",
            kind_option(rs.lk.kind));
    return CLI_EX_USAGE;
  }
#endif
  /* Signals: blocked before any thread exists, so every thread inherits
   * the mask; read synchronously. SIGPIPE is blocked too (a dead Redis
   * connection is an error, not a death); SIGTTOU so that dlock may hand
   * the terminal to the command and take it back. */
  sigset_t fwd, loopset, all, orig;
  sigemptyset(&fwd);
  for (size_t i = 0; i < N_FWD; i++)
    sigaddset(&fwd, g_fwd_sigs[i]);
  loopset = fwd;
  sigaddset(&loopset, SIGCHLD);
  all = loopset;
  sigaddset(&all, SIGPIPE);
  sigaddset(&all, SIGTTOU);
  sigprocmask(SIG_BLOCK, &all, &orig);
  /* Signals ignored on entry (nohup, background jobs of a non-interactive
   * shell) stay ignored, for dlock and the command, as a shell would do.
   * SIGCHLD is the exception: dlock must see its child exit. */
  int chld_ignored = 0;
  {
    struct sigaction sa;
    if (sigaction(SIGCHLD, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) {
      chld_ignored = 1;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = SIG_DFL;
      sigaction(SIGCHLD, &sa, NULL);
    }
  }

  plan p;
  memset(&p, 0, sizeof p);
  p.initial_ok = list_fds(&p.initial, &p.ninitial) == 0;
  int ex = plan_resolve(o, &p);
  if (ex) {
    plan_free(&p);
    return ex;
  }
  int sfd = -1, ep[2] = {-1, -1};
  sup s;
  memset(&s, 0, sizeof s);
  s.pid = -1;
  s.tty_fd = -1;
  s.kill_at = s.lease_end = -1;
  int held = 0;
  init_sync(&rs);
  int evp[2];
  if (pipe2(evp, O_CLOEXEC | O_NONBLOCK) != 0) {
    cli_err("pipe: %s", strerror(errno));
    ex = CLI_EX_SOFT;
    goto out;
  }
  rs.evt_rd = evp[0];
  rs.evt_wr = evp[1];

  long long lease = o->lease_ms > 0 ? o->lease_ms : o->watchdog_ms;
  ex = cli_connect(o, lease, on_lost, &rs, &rs.c);
  if (ex)
    goto out;
  int rc = lk_new(rs.c, o->name, &rs.lk);
  if (rc) {
    ex = lock_error(o, rs.lk.kind, rc, "create");
    goto out;
  }
  /* The holder field: the main thread's, whatever the lock kind. */
  {
    dlock_mutex *probe = NULL;
    rc = dlock_mutex_new(rs.c, o->name, &probe);
    if (rc == 0)
      rc = dlock_mutex_owner(probe, rs.owner, sizeof rs.owner);
    dlock_mutex_free(probe);
    if (rc) {
      ex = lock_error(o, rs.lk.kind, rc, "use");
      goto out;
    }
    if (rs.lk.kind == K_WRITE)
      strncat(rs.owner, ":write", sizeof rs.owner - strlen(rs.owner) - 1);
  }

  long long t0 = 0, t_start = cli_now_ms();
  ex = acquire(&rs, &fwd, &t0);
  if (ex)
    goto out;
  held = 1;
  {
    char w[32], l[32];
    cli_fmt_secs(cli_now_ms() - t_start, w, sizeof w);
    cli_fmt_secs(lease, l, sizeof l);
    cli_debug(o, "acquired lock '%s' as %s after %s s (%s %s s)", o->name,
              rs.owner, w, o->lease_ms > 0 ? "fixed lease" : "watchdog lease",
              l);
  }
  if (o->lease_ms > 0)
    s.lease_end = t0 + o->lease_ms;
  int sig = pending_signal(&fwd);
  if (sig) {
    ex = 128 + sig;
    goto out;
  }

  char token[32] = "";
  if (rs.lk.kind == K_FENCED) {
    uint64_t tok = 0;
    rc = dlock_mutex_token(rs.lk.m, &tok);
    if (rc) {
      ex = lock_error(o, rs.lk.kind, rc, "read the fencing token of");
      goto out;
    }
    snprintf(token, sizeof token, "%" PRIu64, tok);
  }
  if (plan_env(&p, o->name, rs.owner, token[0] ? token : NULL) != 0) {
    cli_err("out of memory");
    ex = CLI_EX_SOFT;
    goto out;
  }

  /* The monitor: reasons for watchdog losses; polling for fixed leases. */
  rs.lease_end = s.lease_end;
  if (o->lease_ms > 0) {
    long long pm = o->lease_ms / 3;
    rs.poll_ms = pm < 100 ? 100 : pm > 10000 ? 10000 : pm;
  }
  if (pthread_create(&rs.mon, NULL, monitor_main, &rs) == 0)
    rs.mon_started = 1;

  sfd = signalfd(-1, &loopset, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0 || pipe2(ep, O_CLOEXEC) != 0) {
    cli_err("signalfd/pipe: %s", strerror(errno));
    ex = CLI_EX_SOFT;
    goto out;
  }
  /* The terminal: if dlock is in the foreground of its controlling
   * terminal, the command's group gets it while the command runs. */
  {
    int tfd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (tfd >= 0 && tcgetpgrp(tfd) == getpgrp())
      s.tty_fd = tfd;
    else if (tfd >= 0)
      close(tfd);
  }
  plan_fds(&p, ep[1]);
  /* Orphans of the command become dlock's children: reaped at once, so
   * "is anything of the group still alive" is answered right. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t parent = getpid();
  s.pid = fork();
  if (s.pid < 0) {
    cli_err("fork: %s", strerror(errno));
    ex = CLI_EX_SOFT;
    goto out;
  }
  if (s.pid == 0)
    child_exec(&p, ep[1], parent, s.tty_fd, &orig, chld_ignored);
  setpgid(s.pid, s.pid);
  if (s.tty_fd >= 0)
    tcsetpgrp(s.tty_fd, s.pid);
  close(ep[1]);
  ep[1] = -1;
  {
    int err = 0;
    ssize_t n;
    do {
      n = read(ep[0], &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof err) {
      int st;
      while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR) {
      }
      s.pid = -1;
      take_tty_back(&s);
      cli_err("cannot run '%s': %s", p.argv[0], strerror(err));
      ex = err == ENOENT ? CLI_EX_NOTFOUND : CLI_EX_NOEXEC;
      goto out;
    }
  }
  cli_debug(o, "started '%s' (pid %d)", p.argv[0], (int)s.pid);

  supervise(&rs, &s, sfd);
  take_tty_back(&s);
  if (!s.done) { /* poll failed: do not leave it running unprotected */
    kill(-s.pid, SIGKILL);
    int st;
    while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR) {
    }
    s.status = st;
    s.done = 1;
  }
  if (WIFSIGNALED(s.status))
    ex = 128 + WTERMSIG(s.status);
  else
    ex = WEXITSTATUS(s.status);
  {
    char st[32];
    if (WIFSIGNALED(s.status))
      sig_name(WTERMSIG(s.status), st, sizeof st);
    else
      snprintf(st, sizeof st, "status %d", WEXITSTATUS(s.status));
    cli_debug(o, "command ended (%s)", st);
  }

out:
  /* Stop the monitor; a probe already requested still completes, so the
   * reason of a loss can be printed. */
  if (rs.mon_started) {
    pthread_mutex_lock(&rs.mu);
    rs.mon_stop = 1;
    pthread_cond_signal(&rs.cv);
    pthread_mutex_unlock(&rs.mu);
    pthread_join(rs.mon, NULL);
    rs.mon_started = 0;
    if (s.pid > 0)
      read_events(&rs, &s);
  }
  if (held) {
    rc = lk_unlock(&rs.lk);
    if (rc == 0) {
      cli_debug(o, "released lock '%s'", o->name);
    } else if (rc == DLOCK_ELOST) {
      if (!s.lost)
        report_loss(&rs, &s,
                    "found at release: it expired, was deleted or was taken "
                    "while the command ran");
      else if (!s.lost_printed)
        report_loss(&rs, &s, "renewal found it gone");
    } else if (!s.lost) {
      char det[1024], l[32];
      cli_detail(cli_url(o), det, sizeof det);
      cli_fmt_secs(lease, l, sizeof l);
      cli_note(o,
               "could not release lock '%s' (%s: %s); it expires within its "
               "%s s lease",
               o->name, dlock_err_name(rc), det, l);
    }
    if (s.lost) {
      if (!s.lost_printed)
        report_loss(&rs, &s, "renewal found it gone or Redis unreachable");
      ex = CLI_EX_LOST;
    }
  }
  lk_free(&rs.lk);
  dlock_client_free(rs.c);
  if (s.tty_fd >= 0)
    close(s.tty_fd);
  if (sfd >= 0)
    close(sfd);
  for (int i = 0; i < 2; i++)
    if (ep[i] >= 0)
      close(ep[i]);
  if (rs.evt_rd >= 0)
    close(rs.evt_rd);
  if (rs.evt_wr >= 0)
    close(rs.evt_wr);
  pthread_cond_destroy(&rs.cv);
  pthread_mutex_destroy(&rs.mu);
  plan_free(&p);
  return ex;
}
