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

enum {
  O_URL,
  O_NONBLOCK,
  O_WAIT,
  O_LEASE,
  O_CONFLICT,
  O_WATCHDOG,
  O_KILL_AFTER,
  O_VERBOSE,
  O_QUIET,
  O_COMMAND,
  O_JSON,
  O_FORCE,
  O_FAIR,
  O_SHARED,
  O_EXCLUSIVE,
  O_FENCE,
  O_HELP,
  O_VERSION
};

/* Which subcommands accept an option. */
#define FOR_RUN 1u
#define FOR_STATUS 2u
#define FOR_UNLOCK 4u
#define FOR_ALL 7u

typedef struct optspec {
  const char *lng;
  char shrt; /* 0: long only */
  int has_arg;
  int id;
  unsigned cmds;
} optspec;

static const optspec g_opts[] = {
    {"url", 'u', 1, O_URL, FOR_ALL},
    {"nonblock", 'n', 0, O_NONBLOCK, FOR_RUN},
    {"nb", 0, 0, O_NONBLOCK, FOR_RUN},
    {"wait", 'w', 1, O_WAIT, FOR_RUN},
    {"timeout", 0, 1, O_WAIT, FOR_RUN},
    {"lease", 'l', 1, O_LEASE, FOR_RUN},
    {"conflict-exit-code", 'E', 1, O_CONFLICT, FOR_RUN},
    {"watchdog", 0, 1, O_WATCHDOG, FOR_RUN},
    {"kill-after", 0, 1, O_KILL_AFTER, FOR_RUN},
    {"verbose", 'v', 0, O_VERBOSE, FOR_ALL},
    {"quiet", 'q', 0, O_QUIET, FOR_ALL},
    {"command", 'c', 1, O_COMMAND, FOR_RUN},
    {"json", 0, 0, O_JSON, FOR_STATUS},
    {"force", 0, 0, O_FORCE, FOR_UNLOCK},
    {"fair", 0, 0, O_FAIR, FOR_RUN | FOR_UNLOCK},
    {"shared", 's', 0, O_SHARED, FOR_RUN},
    {"exclusive", 'x', 0, O_EXCLUSIVE, FOR_RUN},
    {"fence", 0, 0, O_FENCE, FOR_RUN},
    {"help", 'h', 0, O_HELP, FOR_ALL},
    {"version", 'V', 0, O_VERSION, FOR_ALL},
};
#define N_OPTS (sizeof g_opts / sizeof g_opts[0])

typedef struct perr {
  char *buf;
  size_t len;
} perr;

static int fail(perr *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(perr *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->buf, e->len, fmt, ap);
  va_end(ap);
  return -1;
}

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

static const optspec *find_long(const char *name, size_t n) {
  for (size_t i = 0; i < N_OPTS; i++)
    if (strlen(g_opts[i].lng) == n && strncmp(g_opts[i].lng, name, n) == 0)
      return &g_opts[i];
  return NULL;
}

static const optspec *find_short(char c) {
  for (size_t i = 0; i < N_OPTS; i++)
    if (g_opts[i].shrt == c)
      return &g_opts[i];
  return NULL;
}

typedef struct pstate {
  cli_opts *o;
  const char *bad_for[3]; /* per subcommand: first option it rejects */
  int nonblock, wait_set;
} pstate;

static int apply(pstate *ps, const optspec *sp, const char *arg, perr *e) {
  cli_opts *o = ps->o;
  for (int k = 0; k < 3; k++)
    if (!(sp->cmds & (1u << k)) && !ps->bad_for[k])
      ps->bad_for[k] = sp->lng;
  switch (sp->id) {
  case O_URL:
    if (!*arg)
      return fail(e, "invalid URL '': empty");
    o->url = arg;
    return 0;
  case O_NONBLOCK:
    ps->nonblock = 1;
    return 0;
  case O_WAIT:
    ps->wait_set = 1;
    return parse_secs("wait", arg, &o->wait_ms, e);
  case O_LEASE:
    if (parse_secs("lease", arg, &o->lease_ms, e))
      return -1;
    if (o->lease_ms < 10)
      return fail(e, "invalid lease '%s': must be at least 0.01 seconds", arg);
    return 0;
  case O_CONFLICT:
    return parse_code(arg, &o->conflict_code, e);
  case O_WATCHDOG:
    if (parse_secs("watchdog timeout", arg, &o->watchdog_ms, e))
      return -1;
    if (o->watchdog_ms > 2000000000LL)
      return fail(e, "invalid watchdog timeout '%s': at most 2000000 seconds",
                  arg);
    if (o->watchdog_ms < 100)
      return fail(e,
                  "invalid watchdog timeout '%s': must be at least 0.1 "
                  "seconds",
                  arg);
    return 0;
  case O_KILL_AFTER:
    return parse_secs("kill-after grace", arg, &o->kill_after_ms, e);
  case O_VERBOSE:
    o->verbose = 1;
    return 0;
  case O_QUIET:
    o->quiet = 1;
    return 0;
  case O_COMMAND:
    if (o->shell_cmd)
      return fail(e, "-c given twice");
    if (!*arg)
      return fail(e, "empty shell command after -c");
    o->shell_cmd = arg;
    return 0;
  case O_JSON:
    o->json = 1;
    return 0;
  case O_FORCE:
    o->force = 1;
    return 0;
  case O_FAIR:
    o->fair = 1;
    return 0;
  case O_SHARED:
    o->shared = 1;
    return 0;
  case O_EXCLUSIVE:
    o->exclusive = 1;
    return 0;
  case O_FENCE:
    o->fence = 1;
    return 0;
  case O_HELP:
    o->cmd = CLI_HELP;
    return 0;
  case O_VERSION:
    o->cmd = CLI_VERSION;
    return 0;
  }
  return fail(e, "internal: unhandled option --%s", sp->lng);
}

/* One option word at argv[*i]; may consume the next word as its value. */
static int parse_option(int argc, char **argv, int *i, pstate *ps, perr *e) {
  const char *a = argv[*i];
  if (a[1] == '-') {
    const char *nm = a + 2, *eq = strchr(nm, '=');
    size_t n = eq ? (size_t)(eq - nm) : strlen(nm);
    const optspec *sp = find_long(nm, n);
    if (!sp)
      return fail(e, "unknown option '--%.*s'", (int)n, nm);
    const char *val = NULL;
    if (sp->has_arg) {
      if (eq)
        val = eq + 1;
      else if (*i + 1 < argc)
        val = argv[++*i];
      else
        return fail(e, "option '--%s' needs a value", sp->lng);
    } else if (eq) {
      return fail(e, "option '--%s' takes no value", sp->lng);
    }
    return apply(ps, sp, val, e);
  }
  for (const char *p = a + 1; *p; p++) {
    const optspec *sp = find_short(*p);
    if (!sp)
      return fail(e, "unknown option '-%c'", *p);
    if (sp->has_arg) {
      const char *val;
      if (p[1])
        val = p + 1;
      else if (*i + 1 < argc)
        val = argv[++*i];
      else
        return fail(e, "option '-%c' needs a value", *p);
      return apply(ps, sp, val, e);
    }
    if (apply(ps, sp, NULL, e))
      return -1;
  }
  return 0;
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

int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen) {
  perr e = {err, errlen};
  memset(o, 0, sizeof *o);
  o->cmd = CLI_RUN;
  o->wait_ms = -1;
  o->watchdog_ms = 30000;
  o->kill_after_ms = 10000;
  o->conflict_code = 1;
  pstate ps;
  memset(&ps, 0, sizeof ps);
  ps.o = o;
  int have_sub = 0, name_set = 0;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      if (!name_set) {
        if (i >= argc)
          break;
        o->name = argv[i++];
        name_set = 1;
        if (i < argc && strcmp(argv[i], "--") == 0)
          i++;
      }
      break; /* the rest is the command */
    }
    if (a[0] == '-' && a[1] != '\0') {
      if (parse_option(argc, argv, &i, &ps, &e))
        return -1;
      continue;
    }
    if (!name_set) {
      cli_cmd sc;
      if (!have_sub && is_subcommand(a, &sc)) {
        have_sub = 1;
        o->cmd = sc;
        continue;
      }
      have_sub = 1; /* a later "status" is a command word, not a subcommand */
      o->name = a;
      name_set = 1;
      continue;
    }
    break; /* flock style: the command starts here */
  }
  if (o->cmd == CLI_HELP || o->cmd == CLI_VERSION)
    return 0;
  const char *cmdname = o->cmd == CLI_RUN      ? "run"
                        : o->cmd == CLI_STATUS ? "status"
                                               : "unlock";
  int k = o->cmd == CLI_RUN ? 0 : o->cmd == CLI_STATUS ? 1 : 2;
  if (ps.bad_for[k])
    return fail(&e, "option '--%s' does not apply to '%s'", ps.bad_for[k],
                cmdname);
  if (!name_set)
    return fail(&e, "missing lock name");
  if (!*o->name)
    return fail(&e, "empty lock name");
  if (o->verbose && o->quiet)
    return fail(&e, "-v and -q cannot be combined");
  if (o->cmd != CLI_RUN) {
    if (i < argc)
      return fail(&e, "unexpected argument '%s' after the lock name", argv[i]);
    if (o->cmd == CLI_UNLOCK && !o->force)
      return fail(&e, "unlock needs --force (a lock is released by the dlock "
                      "that holds it when its command ends)");
    return 0;
  }
  if (i < argc) {
    if (o->shell_cmd)
      return fail(&e, "give either -c or a command, not both");
    o->argv = argv + i;
  } else if (!o->shell_cmd) {
    return fail(&e, "missing command (dlock NAME -- COMMAND, or -c)");
  }
  if (ps.nonblock)
    o->wait_ms = 0;
  if (o->shared && o->exclusive)
    return fail(&e, "-s/--shared and -x/--exclusive cannot be combined");
  if (o->fair && (o->shared || o->exclusive))
    return fail(&e, "--fair cannot be combined with -s or -x");
  if (o->fence && (o->fair || o->shared || o->exclusive))
    return fail(&e, "--fence cannot be combined with --fair, -s or -x");
  return 0;
}

void cli_usage(FILE *f) {
  /* Must fit an 80x24 terminal: at most 23 lines of at most 79 columns. */
  fputs("Usage: dlock [options] NAME -- COMMAND [ARG...]  run COMMAND holding "
        "lock NAME\n"
        "       dlock [options] NAME -c 'SHELL COMMAND'\n"
        "       dlock run [options] NAME -- COMMAND     (NAME may be 'status' "
        "etc.)\n"
        "       dlock status [--json] NAME              holders, counts, TTL\n"
        "       dlock unlock --force NAME               delete it, whoever "
        "holds it\n"
        "Options:\n"
        "  -u, --url URL      redis://[[user]:pass@]host[:port][/db] or "
        "unix:///path\n"
        "                     (default: $DLOCK_URL, else "
        "redis://127.0.0.1:6379)\n"
        "  -n, --nonblock     fail at once if the lock is held (same as -w "
        "0)\n"
        "  -w, --wait SECS    give up after SECS (fractions allowed; default: "
        "forever)\n"
        "  -E, --conflict-exit-code N  exit code if not acquired (default "
        "1)\n"
        "  -l, --lease SECS   fixed lease, no renewal (the command must end "
        "in time)\n"
        "      --watchdog SECS  renewed lease while the command runs (default "
        "30)\n"
        "      --kill-after SECS  SIGTERM-to-SIGKILL grace (default 10)\n"
        "      --fair         FIFO lock   -s/-x  shared/exclusive "
        "(read-write lock)\n"
        "      --fence        export a fencing token as DLOCK_TOKEN\n"
        "  -v, --verbose      report waits and releases   -q, --quiet  no "
        "notes\n"
        "  -h, --help   -V, --version\n"
        "The command gets DLOCK_NAME and DLOCK_OWNER, runs in its own process "
        "group,\n"
        "and its exit status is dlock's. Not acquired: the -E code. 64 usage, "
        "69 Redis\n"
        "unreachable, 70 Redis error, 75 lock lost (command got SIGTERM), 77 "
        "auth.\n",
        f);
}
