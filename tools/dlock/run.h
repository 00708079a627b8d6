/*
 * run.h -- what the files of "dlock NAME -- COMMAND" share (see run.c for
 * the whole story: signals, waiting, running, loss).
 *
 *   run.c        cli_run: the steps in order, release and report
 *   signals.c    the signal sets, blocking them, names, pending signals
 *   lock.c       the lock kinds behind one interface; errors; the holder
 *   acquire.c    the one blocking wait, cancelled by a watcher thread
 *   monitor.c    the loss callback and the thread that finds out why
 *   spawn.c      resolving, preparing and forking the command
 *   supervise.c  the main loop while the command runs; its exit status
 */
#ifndef DLOCK_CLI_RUN_H
#define DLOCK_CLI_RUN_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "cli.h"

/* ---- signals (signals.c) ------------------------------------------------ */

typedef struct run_sigs {
  sigset_t fwd;     /* forwarded to the command; they end a wait */
  sigset_t loopset; /* fwd + SIGCHLD: what the main loop reads */
  sigset_t orig;    /* the mask dlock started with (the command's) */
  int chld_ignored; /* SIGCHLD was ignored on entry (the command's too) */
} run_sigs;

/* Blocks every signal dlock reacts to, before any thread exists (so that
 * every thread inherits the mask); SIGPIPE and SIGTTOU too. */
void sigs_block(run_sigs *s);
/* "SIGTERM", or "signal 42". */
void sig_name(int sig, char *buf, size_t len);
/* 1 for the forwarded signals that end the command (INT TERM HUP QUIT). */
int sig_is_terminating(int sig);
/* A signal of set already pending (taken), or 0. */
int sig_pending(const sigset_t *set);

/* ---- the lock (lock.c) -------------------------------------------------- */

enum { K_MUTEX, K_FAIR, K_FENCED, K_READ, K_WRITE, K_SEM };

typedef struct lockobj {
  int kind;
  dlock_mutex *m;
  dlock_rwlock *rw;
  dlock_permits *pm;                    /* K_SEM (sem.c) */
  long long sem_n;                      /* K_SEM: --sem N */
  char permit[DLOCK_PERMIT_ID_LEN + 1]; /* K_SEM: the permit taken */
} lockobj;

/* The kind the options ask for. */
int lk_kind(const cli_opts *o);
const char *lk_kind_option(int kind);
int lk_new(dlock_client *c, const char *name, lockobj *lk);
int lk_timed(lockobj *lk, long long wait_ms, long long lease_ms);
int lk_unlock(lockobj *lk);
void lk_free(lockobj *lk);
/* The hold's validity from its local deadline, no round trip: 0 with *ms
 * (-1: a kind without one, --sem), DLOCK_ELOST once it has passed, or the
 * call's other code. */
int lk_validity(lockobj *lk, long long *ms);
/* The holder field the lock will be held under (the main thread's),
 * into owner. 0 or a DLOCK_E* code. */
int lk_owner(dlock_client *c, const char *name, int kind, char *owner,
             size_t len);
/* Prints why "cannot <what> lock NAME" and returns the exit code. */
int lk_error(const cli_opts *o, int kind, int rc, const char *what);

/* ---- --sem N: the lock is a permit of N (sem.c) ------------------------- */

int sem_new(dlock_client *c, const char *name, long long n, lockobj *lk);
int sem_timed(lockobj *lk, long long wait_ms, long long lease_ms);
int sem_unlock(lockobj *lk);
void sem_free(lockobj *lk);

/* ---- the state of one run ----------------------------------------------- */

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
  long long t_begin;   /* dlc_now_ms() at the start: -w counts from here */
  char reason[768];    /* under mu */
  int reason_ready;    /* under mu */
} run_state;

/* The holder to name in messages ("" if unknown), and in other[0..olen)
 * what holds the name when that is another kind than rs's lock: "a
 * read-write lock (-s/-x)" or "a plain, --fair or --fence lock"; "" when
 * it is the same kind or unknown. Kinds never share a name: the library
 * refuses a name held by another kind as held. */
void run_holder_of(run_state *rs, char *buf, size_t len, char *other,
                   size_t olen);

/* The monitor's loss_reason for --sem: why is "" while the permit is ours. */
void sem_loss_reason(run_state *rs, int probe, const char *lease, char *why,
                     size_t len);

/* ---- acquiring (acquire.c) ---------------------------------------------- */

/* Acquires in one blocking call. Returns 1 when held, else 0 with the
 * exit code in *ex (which may be 0: -E 0). *t0 gets the start of the
 * successful call. A signal that arrives as the lock is acquired is
 * queued again for the caller, which then releases the lock and exits
 * 128+N. */
int run_acquire(run_state *rs, const sigset_t *fwd, long long *t0, int *ex);

/* ---- the loss monitor (monitor.c) --------------------------------------- */

/* The events pipe and the monitor's lock; 0 or the exit code. */
int mon_init(run_state *rs);
/* Frees what mon_init made. */
void mon_destroy(run_state *rs);
/* on_lock_lost of the client: runs on its watchdog thread; never blocks. */
void mon_on_lost(const char *name, void *arg);
/* Starts the monitor thread (fixed lease: it polls every third of it). */
void mon_start(run_state *rs, long long lease_end);
/* Stops it; a probe already requested still completes, so the reason of
 * a loss can be printed. */
void mon_stop(run_state *rs);

/* ---- the command (spawn.c) ---------------------------------------------- */

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

/* Records the fds open now and resolves the command like execvp. Returns
 * 0, or the exit code after printing why (126/127, or 70). */
int plan_init(const cli_opts *o, plan *p);
/* The command's environment: ours, plus DLOCK_NAME, DLOCK_OWNER and
 * DLOCK_TOKEN (when token is not NULL). 0 or -1 (out of memory). */
int plan_env(plan *p, const char *name, const char *owner, const char *token);
void plan_free(plan *p);

/* The command while it runs, as the main loop sees it. */
typedef struct sup {
  pid_t pid;
  int tty_fd; /* >= 0: the command owns the terminal while it runs */
  int done, status;
  int lost, lost_printed, term_sent;
  long long kill_at, lease_end;
} sup;

/* Forks and execs the command in its own process group (and terminal
 * foreground when dlock has it). Returns 0 with s->pid set, or the exit
 * code after printing why (an exec failure: 126/127). */
int spawn_command(const run_sigs *sg, plan *p, sup *s);
/* Gives the terminal back to dlock's group. */
void take_tty_back(sup *s);

/* ---- while it runs (supervise.c) ---------------------------------------- */

/* Reads signals from sfd (a signalfd of the loop set), forwards them,
 * reaps, reacts to losses and the fixed lease's end
 * (SIGTERM, then SIGKILL after the grace) until the command has ended.
 * Returns its exit status as dlock's (128+N for a signal). */
int supervise(run_state *rs, sup *s, int sfd);
/* Marks the lock lost: SIGTERM to a running command, and (once) the
 * message when a reason is given. */
void report_loss(run_state *rs, sup *s, const char *reason);
/* Drains the events pipe (losses from the callback and the monitor). */
void read_events(run_state *rs, sup *s);

#endif
