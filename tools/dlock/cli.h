/*
 * cli.h -- the dlock command-line tool: "flock(1) across machines".
 *
 * Files: args.c (command line -> cli_opts, --help), run.c and the files
 * run.h lists (acquire, run the command, supervise it, release), admin.c
 * (status, unlock --force), sem.c (--sem N on expirable permits, and the
 * status of such a name), util.c (messages, exit codes, the client
 * policy), main.c; list.c, exporter.c, lockscan.c and lockwho.c (obs.h):
 * list, top and exporter, which read the lock space through the library's
 * operators' reads (<dlock/admin.h>: every URL form, TLS, ACL users, the
 * config file; no connection code of their own). Only the public API of
 * <dlock.h> and <dlock/admin.h> is used, and tools/common (clocks, JSON,
 * URL redaction, option parsing).
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "clock.h"
#include "dlock.h"

/* Exit codes (sysexits.h values; the conflict code is -E, default 1). */
#define CLI_EX_FREE 3     /* status: the lock is free (LSB "not running") */
#define CLI_EX_USAGE 64   /* EX_USAGE: bad command line, malformed URL */
#define CLI_EX_UNAVAIL 69 /* EX_UNAVAILABLE: Redis unreachable */
#define CLI_EX_SOFT 70    /* EX_SOFTWARE: any other Redis error */
#define CLI_EX_LOST 75    /* EX_TEMPFAIL: the lock was lost */
#define CLI_EX_AUTH 77    /* EX_NOPERM: authentication or TLS refused */
#define CLI_EX_NOEXEC 126 /* the command could not be executed */
#define CLI_EX_NOTFOUND 127

typedef enum cli_cmd {
  CLI_RUN,
  CLI_STATUS,
  CLI_UNLOCK,
  CLI_HELP,
  CLI_VERSION
} cli_cmd;

typedef struct cli_opts {
  cli_cmd cmd;
  const char *url;      /* -u; NULL: $DLOCK_URL, the file's, the default */
  const char *config;   /* --config; NULL: $DLOCK_CONFIG, else none */
  const char *tls_ca;   /* --tls-ca, --tls-cert, --tls-key: NULL if not */
  const char *tls_cert; /* given (the file's, else none) */
  const char *tls_key;
  int tls_insecure;      /* --tls-insecure */
  const char *name;      /* the lock */
  char **argv;           /* the command (NULL-terminated), or NULL */
  const char *shell_cmd; /* -c STRING, or NULL */
  long long wait_ms;     /* -1: forever; 0: one attempt */
  long long lease_ms;    /* 0: watchdog lease */
  long long watchdog_ms; /* --watchdog, else the file's, else 30 s */
  int watchdog_set;      /* --watchdog was given */
  long long kill_after_ms;
  long long call_timeout_ms; /* --call-timeout; -1: not given */
  int conflict_code;         /* -E */
  int verbose, quiet, json, force;
  int fair, shared, exclusive, fence;
  long long sem_n; /* --sem N; 0: not a semaphore */
  /* The client's settings (cli_settings): the CLI's defaults, then the
   * config file, then $DLOCK_URL, then the flags. */
  dlock_config cfg;
} cli_opts;

#define CLI_DEFAULT_URL "redis://127.0.0.1:6379"

/* Parses argv into *o. Returns 0, or -1 with a one-line reason in err. */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen);

/* Prints --help to f. */
void cli_usage(FILE *f);

/* list, top, exporter (list.c): 1 with *exit_code set when argv is one
 * of those commands, else 0 (argv is cli_parse's). */
int cli_obs_dispatch(int argc, char **argv, int *exit_code);

int cli_run(const cli_opts *o);
int cli_status(const cli_opts *o);
int cli_unlock(const cli_opts *o);
/* status of a --sem name (sem.c): 1 when NAME holds permits (printed; *ex
 * the exit code), 0 when it is no permits key (the lock status applies).
 * lk: the name as lockscan read it (who took each permit). */
struct ls_lock;
int sem_status(const cli_opts *o, dlock_client *c, const struct ls_lock *lk,
               int *ex);

/* ---- util.c ---------------------------------------------------------- */

/* "dlock: <message>\n" on stderr. cli_note is silenced by -q; cli_debug
 * prints only with -v. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_note(const cli_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "2026-11-27T10:40:00.123Z" (UTC, ms) into buf: -v lines start with it. */
void cli_stamp(char *buf, size_t len);
void cli_debug(const cli_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Fills o->cfg from, lowest first: the CLI's defaults (see cli_connect),
 * the config file (--config, else $DLOCK_CONFIG), $DLOCK_URL, the flags;
 * takes the file's lockWatchdogTimeout unless --watchdog was given. Warns
 * on stderr when TLS certificates will not be verified. 0, or the exit
 * code after printing why (a bad file: 64). Free with dlock_config_dispose
 * (&o->cfg). */
int cli_settings(cli_opts *o);

/* The URL to use (o->cfg.url, after cli_settings). */
const char *cli_url(const cli_opts *o);

/* The calling thread's dlock_last_error(), with the raw URL replaced by its
 * redacted form (the library quotes malformed URLs verbatim). */
void cli_detail(const char *url, char *buf, size_t len);

/* Like cli_detail, for the message d. */
void cli_redact(const char *url, const char *d, char *buf, size_t len);

/* Exit code for a DLOCK_E* failure (reads dlock_last_error() for EREDIS:
 * an ACL refusal, NOPERM, is 77). */
int cli_exit_code(int rc);

/* Creates the client with the CLI's timeouts and retry policy (see the
 * man page). On failure prints one line and returns the exit code (> 0);
 * 0 on success. lease_ms is the lease the client's locks will use.
 * deadline_ms (dlc_now_ms() clock; -1: none): when connecting has not
 * succeeded or failed by then, prints why and exits the process with 69
 * (-w SECS bounds the whole call). */
int cli_connect(const cli_opts *o, long long lease_ms, long long deadline_ms,
                void (*on_lost)(const char *, void *), void *arg,
                dlock_client **out);

/* The main command's words for a failure to use Redis at url (exit_code
 * 69: "cannot reach Redis at URL: why", 77: refused, else "cannot use"),
 * on stderr, the URL redacted, library field names in CLI terms. */
void cli_say_failed(const char *url, int exit_code, const char *why);

/* 1: every stderr line starts with the time (the long-running commands:
 * top, exporter). */
extern int cli_stamped;

/* Formats ms as seconds ("0.5", "30", "1.25"). */
void cli_fmt_secs(long long ms, char *buf, size_t len);

#endif
