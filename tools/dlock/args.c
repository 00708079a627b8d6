/*
 * args.c -- the command line. A small hand-written parser (not getopt)
 * because the grammar mixes a subcommand word, options before and after the
 * lock name, and a command that starts at "--" or at the first word after
 * the name (flock style); and because every mistake must come back as one
 * line that says what is wrong.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"

enum {
  O_URL,
  O_CONFIG,
  O_TLS_CA,
  O_TLS_CERT,
  O_TLS_KEY,
  O_TLS_INSECURE,
  O_NONBLOCK,
  O_WAIT,
  O_LEASE,
  O_CONFLICT,
  O_WATCHDOG,
  O_KILL_AFTER,
  O_CALL_TIMEOUT,
  O_VERBOSE,
  O_QUIET,
  O_COMMAND,
  O_JSON,
  O_FORCE,
  O_FAIR,
  O_SHARED,
  O_EXCLUSIVE,
  O_FENCE,
  O_SEM,
  O_HELP,
  O_VERSION
};

/* Which subcommands accept an option (dlc_opt.scope). */
#define FOR_RUN 1u
#define FOR_STATUS 2u
#define FOR_UNLOCK 4u
#define FOR_ALL 7u

/* In --help order; -c, --json and --force are shown in the usage lines,
 * --nb and --timeout are aliases. Must fit an 80x24 terminal with the
 * rest of --help: at most 23 lines of at most 79 columns. */
static const dlc_opt g_opts[] = {
    {"url", 'u', "URL", O_URL, FOR_ALL,
     "redis[s]://[[user]:pass@]host[:port][/db], unix:///path,\n"
     "redis[s]-sentinel://h:p,.../master, redis[s]-cluster://\n"
     "h:p,..., etcd[s]://[user:pass@]h:p,...[/prefix] ([s]: TLS;\n"
     "default: $DLOCK_URL, the file's, redis://127.0.0.1:6379)"},
    {"config", 0, "FILE", O_CONFIG, FOR_ALL, "YAML ($DLOCK_CONFIG)"},
    {"tls-insecure", 0, NULL, O_TLS_INSECURE, FOR_ALL, "skip cert check",
     "--tls-insecure", DLC_OPT_JOIN},
    {"tls-ca", 0, "FILE", O_TLS_CA, FOR_ALL, "CA bundle, client cert, its key",
     "    --tls-ca, --tls-cert, --tls-key FILE"},
    {"tls-cert", 0, "FILE", O_TLS_CERT, FOR_ALL, NULL},
    {"tls-key", 0, "FILE", O_TLS_KEY, FOR_ALL, NULL},
    {"nonblock", 'n', NULL, O_NONBLOCK, FOR_RUN, "fail at once if held (-w 0)"},
    {"nb", 0, NULL, O_NONBLOCK, FOR_RUN, NULL},
    {"sem", 0, "N", O_SEM, FOR_RUN, "N holders at once", "--sem N",
     DLC_OPT_JOIN},
    {"wait", 'w', "SECS", O_WAIT, FOR_RUN,
     "give up after SECS, connecting included (default: forever)"},
    {"timeout", 0, "SECS", O_WAIT, FOR_RUN, NULL},
    {"conflict-exit-code", 'E', "N", O_CONFLICT, FOR_RUN,
     "exit code if not acquired (default 1)"},
    {"lease", 'l', "SECS", O_LEASE, FOR_RUN,
     "fixed lease, no renewal (the command must end in time)"},
    {"watchdog", 0, "SECS", O_WATCHDOG, FOR_RUN, "renewed lease (30)"},
    {"kill-after", 0, "SECS", O_KILL_AFTER, FOR_RUN, "TERM..KILL (10)",
     "--kill-after SECS", DLC_OPT_JOIN},
    {"call-timeout", 0, "SECS", O_CALL_TIMEOUT, FOR_ALL,
     "retry a call this long at most (default 5)"},
    {"fair", 0, NULL, O_FAIR, FOR_RUN | FOR_UNLOCK, "FIFO lock"},
    {"shared", 's', NULL, O_SHARED, FOR_RUN,
     "shared/exclusive (read-write lock)", "-s/-x", DLC_OPT_JOIN},
    {"exclusive", 'x', NULL, O_EXCLUSIVE, FOR_RUN, NULL},
    {"verbose", 'v', NULL, O_VERBOSE, FOR_ALL, "report waits and releases"},
    {"quiet", 'q', NULL, O_QUIET, FOR_ALL, "no notes", NULL, DLC_OPT_JOIN},
    {"fence", 0, NULL, O_FENCE, FOR_RUN, "fencing token in $DLOCK_TOKEN"},
    {"help", 'h', NULL, O_HELP, FOR_ALL, "", NULL, DLC_OPT_JOIN},
    {"version", 'V', NULL, O_VERSION, FOR_ALL, "", NULL, DLC_OPT_JOIN},
    {"command", 'c', "STRING", O_COMMAND, FOR_RUN, NULL},
    {"json", 0, NULL, O_JSON, FOR_STATUS, NULL},
    {"force", 0, NULL, O_FORCE, FOR_UNLOCK, NULL},
};

static const dlc_optset g_optset = {g_opts, sizeof g_opts / sizeof g_opts[0],
                                    21, 1, 0};

typedef struct perr {
  char *buf;
  size_t len;
} perr;

#define fail(e, ...) dlc_opt_fail((e)->buf, (e)->len, __VA_ARGS__)

/* Seconds: digits with an optional fraction ("5", "0.5", ".25"), at most
 * 1e9. No sign, exponent, hex, blanks, nan or inf. */
static int parse_secs(const char *what, const char *s, long long *ms, perr *e) {
  const char *p = s;
  int digits = 0, dot = 0;
  for (; *p; p++) {
    if (isdigit((unsigned char)*p))
      digits++;
    else if (*p == '.' && !dot)
      dot = 1;
    else
      break;
  }
  if (*p || digits == 0) {
    if (*s == '-')
      return fail(e, "invalid %s '%s': must not be negative", what, s);
    return fail(e, "invalid %s '%s': expected a number of seconds", what, s);
  }
  double v = strtod(s, NULL);
  if (!(v <= 1e9))
    return fail(e, "invalid %s '%s': too large (at most 1e9 seconds)", what, s);
  *ms = (long long)(v * 1000.0 + 0.5);
  return 0;
}

static int parse_code(const char *s, int *code, perr *e) {
  size_t n = strlen(s);
  if (n == 0 || n > 3 || strspn(s, "0123456789") != n || atoi(s) > 255)
    return fail(e, "invalid conflict exit code '%s': expected 0 to 255", s);
  *code = atoi(s);
  return 0;
}

typedef struct pstate {
  cli_opts *o;
  const char *bad_for[3]; /* per subcommand: first option it rejects */
  int nonblock;
  int name_set;
} pstate;

/* The options that only set a flag: sets it; 0 if id is not one. */
static int set_flag(pstate *ps, int id) {
  cli_opts *o = ps->o;
  const struct {
    int id;
    int *flag;
  } t[] = {{O_NONBLOCK, &ps->nonblock}, {O_VERBOSE, &o->verbose},
           {O_QUIET, &o->quiet},        {O_JSON, &o->json},
           {O_FORCE, &o->force},        {O_FAIR, &o->fair},
           {O_SHARED, &o->shared},      {O_EXCLUSIVE, &o->exclusive},
           {O_FENCE, &o->fence},        {O_TLS_INSECURE, &o->tls_insecure}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i].id == id) {
      *t[i].flag = 1;
      return 1;
    }
  return 0;
}

/* The options with a number of seconds. */
static int apply_secs(cli_opts *o, int id, const char *arg, perr *e) {
  switch (id) {
  case O_WAIT:
    return parse_secs("wait", arg, &o->wait_ms, e);
  case O_LEASE:
    if (parse_secs("lease", arg, &o->lease_ms, e))
      return -1;
    if (o->lease_ms < 10)
      return fail(e, "invalid lease '%s': must be at least 0.01 seconds", arg);
    return 0;
  case O_WATCHDOG:
    if (parse_secs("watchdog timeout", arg, &o->watchdog_ms, e))
      return -1;
    o->watchdog_set = 1;
    if (o->watchdog_ms > 2000000000LL)
      return fail(e, "invalid watchdog timeout '%s': at most 2000000 seconds",
                  arg);
    if (o->watchdog_ms < 100)
      return fail(e,
                  "invalid watchdog timeout '%s': must be at least 0.1 "
                  "seconds",
                  arg);
    return 0;
  case O_CALL_TIMEOUT:
    return parse_secs("call timeout", arg, &o->call_timeout_ms, e);
  default: /* O_KILL_AFTER */
    return parse_secs("kill-after grace", arg, &o->kill_after_ms, e);
  }
}

/* The options whose value is a file name. */
static int set_file(cli_opts *o, const dlc_opt *sp, const char *arg, perr *e) {
  if (!*arg)
    return fail(e, "option '--%s' needs a file name, not ''", sp->lng);
  const char **dst = sp->id == O_CONFIG     ? &o->config
                     : sp->id == O_TLS_CA   ? &o->tls_ca
                     : sp->id == O_TLS_CERT ? &o->tls_cert
                                            : &o->tls_key;
  *dst = arg;
  return 0;
}

static int apply(void *ctx, const dlc_opt *sp, const char *arg, char *err,
                 size_t errlen) {
  pstate *ps = ctx;
  cli_opts *o = ps->o;
  perr e = {err, errlen};
  for (int k = 0; k < 3; k++)
    if (!(sp->scope & (1u << k)) && !ps->bad_for[k])
      ps->bad_for[k] = sp->lng;
  if (set_flag(ps, sp->id))
    return 0;
  if (sp->id == O_HELP || sp->id == O_VERSION) {
    o->cmd = sp->id == O_HELP ? CLI_HELP : CLI_VERSION;
    return 0;
  }
  if (!arg) /* every other option has a value */
    return fail(&e, "option '--%s' needs a value", sp->lng);
  switch (sp->id) {
  case O_URL:
    if (!*arg)
      return fail(&e, "invalid URL '': empty");
    o->url = arg;
    return 0;
  case O_CONFIG:
  case O_TLS_CA:
  case O_TLS_CERT:
  case O_TLS_KEY:
    return set_file(o, sp, arg, &e);
  case O_CONFLICT:
    return parse_code(arg, &o->conflict_code, &e);
  case O_SEM:
    return dlc_opt_ll("--sem", arg, 1, 1000000, &o->sem_n, err, errlen);
  case O_COMMAND:
    if (o->shell_cmd)
      return fail(&e, "-c given twice");
    if (!*arg)
      return fail(&e, "empty shell command after -c");
    o->shell_cmd = arg;
    return 0;
  default:
    return apply_secs(o, sp->id, arg, &e);
  }
}

static int is_subcommand(const char *a, cli_cmd *cmd) {
  if (strcmp(a, "run") == 0)
    *cmd = CLI_RUN;
  else if (strcmp(a, "status") == 0)
    *cmd = CLI_STATUS;
  else if (strcmp(a, "unlock") == 0)
    *cmd = CLI_UNLOCK;
  else
    return 0;
  return 1;
}

/* The words before the command: options, the subcommand, the lock name.
 * Returns the index where the command starts (argc: none), or -1. */
static int scan(int argc, char **argv, pstate *ps, perr *e) {
  cli_opts *o = ps->o;
  int have_sub = 0, i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      /* "dlock -- NAME [--] COMMAND" takes NAME; "dlock -- COMMAND" (one
       * word, as a flock user might type) has no lock name. */
      if (!ps->name_set && i + 1 == argc)
        return fail(e, "missing lock name before '--' (dlock NAME -- "
                       "COMMAND)");
      if (!ps->name_set && i < argc) {
        o->name = argv[i++];
        ps->name_set = 1;
        if (i < argc && strcmp(argv[i], "--") == 0)
          i++;
      }
      return i; /* the rest is the command */
    }
    if (a[0] == '-' && a[1] != '\0') {
      if (dlc_opt_word(&g_optset, argc, argv, &i, apply, ps, e->buf, e->len))
        return -1;
      continue;
    }
    if (ps->name_set)
      return i; /* flock style: the command starts here */
    cli_cmd sc;
    if (!have_sub && is_subcommand(a, &sc)) {
      have_sub = 1;
      o->cmd = sc;
      continue;
    }
    have_sub = 1; /* a later "status" is a command word, not a subcommand */
    o->name = a;
    ps->name_set = 1;
  }
  return i;
}

/* What every subcommand needs: options that apply, a lock name. */
static int check_common(const pstate *ps, perr *e) {
  const cli_opts *o = ps->o;
  const char *cmdname = o->cmd == CLI_RUN      ? "run"
                        : o->cmd == CLI_STATUS ? "status"
                                               : "unlock";
  int k = o->cmd == CLI_RUN ? 0 : o->cmd == CLI_STATUS ? 1 : 2;
  if (ps->bad_for[k])
    return fail(e, "option '--%s' does not apply to '%s'", ps->bad_for[k],
                cmdname);
  if (!ps->name_set)
    return fail(e, "missing lock name");
  if (!*o->name)
    return fail(e, "empty lock name");
  if (o->verbose && o->quiet)
    return fail(e, "-v and -q cannot be combined");
  return 0;
}

/* run: a command (words or -c, not both), and lock kinds that combine. */
static int check_run(const pstate *ps, int argc, char **argv, int i, perr *e) {
  cli_opts *o = ps->o;
  if (i < argc) {
    if (o->shell_cmd)
      return fail(e, "give either -c or a command, not both");
    o->argv = argv + i;
  } else if (!o->shell_cmd) {
    return fail(e, "missing command (dlock NAME -- COMMAND, or -c)");
  }
  if (ps->nonblock)
    o->wait_ms = 0;
  if (o->shared && o->exclusive)
    return fail(e, "-s/--shared and -x/--exclusive cannot be combined");
  if (o->fair && (o->shared || o->exclusive))
    return fail(e, "--fair cannot be combined with -s or -x");
  if (o->fence && (o->fair || o->shared || o->exclusive))
    return fail(e, "--fence cannot be combined with --fair, -s or -x");
  if (o->sem_n && (o->fair || o->fence || o->shared || o->exclusive))
    return fail(e, "--sem cannot be combined with --fair, --fence, -s or -x");
  return 0;
}

int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen) {
  perr e = {err, errlen};
  memset(o, 0, sizeof *o);
  o->cmd = CLI_RUN;
  o->wait_ms = -1;
  o->watchdog_ms = 30000;
  o->kill_after_ms = 10000;
  o->call_timeout_ms = -1;
  o->conflict_code = 1;
  pstate ps;
  memset(&ps, 0, sizeof ps);
  ps.o = o;
  int i = scan(argc, argv, &ps, &e);
  if (i < 0)
    return -1;
  if (o->cmd == CLI_HELP || o->cmd == CLI_VERSION)
    return 0;
  if (check_common(&ps, &e))
    return -1;
  if (o->cmd == CLI_RUN)
    return check_run(&ps, argc, argv, i, &e);
  if (i < argc)
    return fail(&e, "unexpected argument '%s' after the lock name", argv[i]);
  if (o->cmd == CLI_UNLOCK && !o->force)
    return fail(&e, "unlock needs --force (a lock is released by the dlock "
                    "that holds it when its command ends)");
  return 0;
}

void cli_usage(FILE *f) {
  fputs("Usage: dlock [options] NAME -- COMMAND [ARG...]  run COMMAND holding "
        "lock NAME\n"
        "       dlock [options] NAME -c 'SHELL COMMAND'\n"
        "       dlock run [options] NAME -- COMMAND     (NAME may be 'status' "
        "etc.)\n"
        "       dlock status [--json] NAME              who holds, waits (3: "
        "free)\n"
        "       dlock unlock --force NAME               delete it, whoever "
        "holds it\n"
        "       dlock list|top|exporter  every lock of a Redis (list: etcd)\n",
        f);
  dlc_opt_help(f, &g_optset);
  fputs("Exit: the command's; not acquired: -E; 64 usage, 69 Redis "
        "unreachable,\n"
        "70 Redis error, 75 lock lost (command got SIGTERM), 77 auth, ACL or "
        "TLS.\n",
        f);
}
