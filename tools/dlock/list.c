/*
 * list.c -- `dlock list`, `dlock top` and the option parsing they share
 * with `dlock exporter` (exporter.c): the lock space of a whole Redis
 * (lockscan.c), for an operator. Entry: cli_obs_dispatch (main.c).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "etcd_admin.h"
#include "json.h"
#include "lockscan.h"
#include "obs.h"
#include "opts.h"

enum {
  B_URL,
  B_CONFIG,
  B_TLS_CA,
  B_TLS_CERT,
  B_TLS_KEY,
  B_TLS_INSECURE,
  B_CALL_TIMEOUT,
  B_JSON,
  B_ALL,
  B_COUNT,
  B_INTERVAL,
  B_LIMIT,
  B_SCAN_COUNT,
  B_MAX_KEYS,
  B_LISTEN,
  B_SCRAPE_TIMEOUT,
  B_MAX_LOCKS,
  B_HELP
};

#define FOR_LIST 1u
#define FOR_TOP 2u
#define FOR_EXPORTER 4u

static const dlc_opt g_bopts[] = {
    {"url", 'u', "URL", B_URL, 7,
     "as for dlock: redis[s]://, unix://, redis[s]-sentinel://,\n"
     "redis[s]-cluster://, etcd:// (default: $DLOCK_URL, the file's)"},
    {"config", 0, "FILE", B_CONFIG, 7,
     "YAML ($DLOCK_CONFIG): server, password, TLS"},
    {"tls-insecure", 0, NULL, B_TLS_INSECURE, 7, "skip the certificate check"},
    {"tls-ca", 0, "FILE", B_TLS_CA, 7, "CA bundle, client cert, its key",
     "    --tls-ca, --tls-cert, --tls-key FILE"},
    {"tls-cert", 0, "FILE", B_TLS_CERT, 7, NULL},
    {"tls-key", 0, "FILE", B_TLS_KEY, 7, NULL},
    {"call-timeout", 0, "SECS", B_CALL_TIMEOUT, 7,
     "a master silent this long failed (2)"},
    {"json", 0, NULL, B_JSON, FOR_LIST, "list: one JSON document"},
    {"all", 'a', NULL, B_ALL, 7,
     "also integer strings nothing marks as a semaphore"},
    {"count", 'n', "N", B_COUNT, FOR_TOP, "top: refreshes, then exit"},
    {"interval", 'i', "SECS", B_INTERVAL, FOR_TOP, "top: refresh period (1)"},
    {"limit", 0, "N", B_LIMIT, FOR_TOP, "top: rows (20)"},
    {"scan-count", 0, "N", B_SCAN_COUNT, 7, "SCAN COUNT per call (1000)"},
    {"max-keys", 0, "N", B_MAX_KEYS, 7, "stop a scan after N keys (none)"},
    {"listen", 'l', "ADDR", B_LISTEN, FOR_EXPORTER,
     "exporter: [HOST]:PORT to serve /metrics on"},
    {"scrape-timeout", 0, "SECS", B_SCRAPE_TIMEOUT, FOR_EXPORTER,
     "exporter: a scrape's whole time at most (10)"},
    {"max-locks", 0, "N", B_MAX_LOCKS, FOR_EXPORTER,
     "exporter: per-lock series at most (1000)"},
    {"help", 'h', NULL, B_HELP, 7, ""},
};
static const dlc_optset g_bset = {g_bopts, sizeof g_bopts / sizeof g_bopts[0],
                                  22, 1, 0};

typedef struct bstate {
  obs_opts *o;
  unsigned scope;
  const char *cmd;
} bstate;

static int parse_secs(const char *what, const char *s, long long *ms, char *err,
                      size_t el) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !(v >= 0.01 && v <= 86400))
    return dlc_opt_fail(err, el, "%s: expected seconds, 0.01 to 86400: '%s'",
                        what, s);
  *ms = (long long)(v * 1000 + 0.5);
  return 0;
}

static int bapply(void *ctx, const dlc_opt *sp, const char *arg, char *err,
                  size_t el) {
  bstate *bs = ctx;
  obs_opts *o = bs->o;
  if (!(sp->scope & bs->scope))
    return dlc_opt_fail(err, el, "option '--%s' does not apply to '%s'",
                        sp->lng, bs->cmd);
  long long v = 0;
  switch (sp->id) {
  case B_URL:
    if (!*arg)
      return dlc_opt_fail(err, el, "invalid URL '': empty");
    o->url = arg;
    return 0;
  case B_CONFIG:
  case B_TLS_CA:
  case B_TLS_CERT:
  case B_TLS_KEY:
    if (!*arg)
      return dlc_opt_fail(err, el, "option '--%s' needs a file name, not ''",
                          sp->lng);
    *(sp->id == B_CONFIG     ? &o->config
      : sp->id == B_TLS_CA   ? &o->tls_ca
      : sp->id == B_TLS_CERT ? &o->tls_cert
                             : &o->tls_key) = arg;
    return 0;
  case B_TLS_INSECURE:
    o->tls_insecure = 1;
    return 0;
  case B_CALL_TIMEOUT:
    return parse_secs("--call-timeout", arg, &o->call_ms, err, el);
  case B_JSON:
    o->json = 1;
    return 0;
  case B_ALL:
    o->all = 1;
    return 0;
  case B_HELP:
    o->help = 1;
    return 0;
  case B_LISTEN:
    o->listen = arg;
    return 0;
  case B_INTERVAL:
    return parse_secs("--interval", arg, &o->interval_ms, err, el);
  case B_SCRAPE_TIMEOUT:
    return parse_secs("--scrape-timeout", arg, &o->scrape_timeout_ms, err, el);
  default:
    if (dlc_opt_ll(sp->lng, arg, 1, 1000000000000LL, &v, err, el))
      return -1;
    if (sp->id == B_COUNT)
      o->count = v;
    else if (sp->id == B_LIMIT)
      o->limit = v;
    else if (sp->id == B_SCAN_COUNT)
      o->scan_count = v > 100000 ? 100000 : (int)v;
    else if (sp->id == B_MAX_KEYS)
      o->max_keys = v;
    else
      o->max_locks = v;
    return 0;
  }
}

static void usage(FILE *f, const char *cmd) {
  fprintf(f,
          "Usage: dlock list [options] [PATTERN]   the locks of a Redis "
          "(every master)\n"
          "       dlock top [options] [PATTERN]    the busiest, live "
          "(q quits)\n"
          "       dlock exporter --listen ADDR     Prometheus /metrics\n"
          "PATTERN: a SCAN MATCH glob on lock names (default *).\n"
          "Options (%s):\n",
          cmd);
  dlc_opt_help(f, &g_bset);
  fputs(
      "A master that fails is named on stderr after what the others had\n"
      "(list, top), or as dlock_up{node} 0 and dlock_scrape_error (exporter).\n"
      "Exit: 0; 64 usage, 69 Redis (a master) unreachable, 70 Redis error,\n"
      "77 authentication, ACL (NOPERM) or TLS refused.\n",
      f);
}

/* Which word is the subcommand: the first that is not an option or the
 * value of one (-u URL, --config FILE). -1: none of ours (also when a
 * command follows: "--" or -c). */
static int find_cmd(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0)
      return -1;
    if (a[0] == '-') {
      if (strcmp(a, "-u") == 0 || strcmp(a, "--url") == 0 ||
          strcmp(a, "--config") == 0 || strcmp(a, "--call-timeout") == 0 ||
          (strncmp(a, "--tls-", 6) == 0 && strcmp(a, "--tls-insecure") != 0 &&
           !strchr(a, '=')))
        i++;
      continue;
    }
    if (strcmp(a, "list") != 0 && strcmp(a, "top") != 0 &&
        strcmp(a, "exporter") != 0)
      return -1; /* a lock name or another subcommand */
    /* "dlock top -- CMD", "dlock list -c CMD": a lock of that name, as
     * before these commands existed */
    for (int j = i + 1; j < argc; j++)
      if (strcmp(argv[j], "--") == 0 || strcmp(argv[j], "-c") == 0 ||
          strcmp(argv[j], "--command") == 0)
        return -1;
    return i;
  }
  return -1;
}

int obs_parse(int argc, char **argv, obs_opts *o, char *err, size_t el) {
  memset(o, 0, sizeof *o);
  o->interval_ms = 1000;
  o->limit = 20;
  o->scrape_timeout_ms = 10000;
  o->max_locks = 1000;
  int ci = find_cmd(argc, argv);
  if (ci < 0)
    return 1;
  o->cmd = argv[ci];
  bstate bs = {o,
               strcmp(o->cmd, "list") == 0  ? FOR_LIST
               : strcmp(o->cmd, "top") == 0 ? FOR_TOP
                                            : FOR_EXPORTER,
               o->cmd};
  for (int i = 1; i < argc; i++) {
    if (i == ci)
      continue;
    const char *a = argv[i];
    if (a[0] == '-' && a[1]) {
      if (dlc_opt_word(&g_bset, argc, argv, &i, bapply, &bs, err, el))
        return -1;
      continue;
    }
    if (bs.scope == FOR_EXPORTER || o->pattern)
      return dlc_opt_fail(err, el, "unexpected argument '%s'", a);
    if (!*a)
      return dlc_opt_fail(err, el, "empty pattern");
    o->pattern = a;
  }
  if (!o->help && bs.scope == FOR_EXPORTER && !o->listen)
    return dlc_opt_fail(err, el, "exporter needs --listen [HOST]:PORT");
  return 0;
}

/* The client and the admin object: the settings as for every dlock
 * command (cli_settings: the CLI's defaults, the config file, $DLOCK_URL,
 * the flags), connected as the main command connects (cli_connect: the
 * same messages and exit codes). The exporter starts when Redis is only
 * unreachable (dlock_up 0 until it answers), never with a URL, a file or a
 * certificate it cannot use. 0 or the exit code. */
/* obs_connect's answer for an etcd:// URL (settings read, nothing
 * connected). */
#define OBS_ETCD (-1)

static int obs_connect(obs_opts *o, cli_opts *co, dlock_client **c) {
  memset(co, 0, sizeof *co);
  co->url = o->url;
  co->config = o->config;
  co->tls_ca = o->tls_ca;
  co->tls_cert = o->tls_cert;
  co->tls_key = o->tls_key;
  co->tls_insecure = o->tls_insecure;
  co->watchdog_ms = 30000;
  co->quiet = 1;
  int ex = cli_settings(co);
  if (ex)
    return ex;
  o->resolved_url = cli_url(co);
  if (cli_etcd_url(o->resolved_url))
    return OBS_ETCD; /* no Redis connection: etcd_admin.c reads */
  if (o->call_ms <= 0)
    o->call_ms = 2000;
  /* a reply of a master within --call-timeout, its connection within it */
  co->cfg.command_timeout_ms = (int)o->call_ms;
  if (co->cfg.connect_timeout_ms > o->call_ms)
    co->cfg.connect_timeout_ms = (int)o->call_ms;
  int exporter = strcmp(o->cmd, "exporter") == 0;
  ex = cli_connect(co, co->watchdog_ms, -1, NULL, NULL, c);
  if (ex == CLI_EX_UNAVAIL && exporter) {
    cli_err("serving dlock_up 0 until Redis answers");
    co->cfg.lazy_connect = 1;
    ex = cli_connect(co, co->watchdog_ms, -1, NULL, NULL, c);
  }
  if (ex == 0 && dlock_admin_new(*c, &o->admin) != 0) {
    cli_err("%s", dlock_last_error());
    ex = CLI_EX_SOFT;
  }
  return ex;
}

int obs_report_errors(const ls_result *r) {
  int ex = 0;
  for (size_t i = 0; i < r->nerrors; i++) {
    cli_err("master %s: %s", r->errors[i].node, r->errors[i].why);
    if (r->errors[i].code == CLI_EX_AUTH || ex == 0)
      ex = r->errors[i].code;
  }
  return ex;
}

int obs_scan(const obs_opts *o, long long deadline_ms, ls_result *r) {
  ls_opts lo = {o->pattern,  o->scan_count, o->max_keys,
                deadline_ms, o->call_ms,    o->all};
  char err[1024];
  int rc = ls_scan(o->admin, &lo, r, err, sizeof err);
  if (rc)
    cli_say_failed(o->resolved_url, rc, err);
  return rc;
}

/* ---- list ------------------------------------------------------------- */

static void iso_ms(long long ms, char *buf, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[32];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, n, "%s.%03lldZ", b, ms % 1000);
}

/* A JSON string, or null for "" (unknown). */
static void json_str_or_null(FILE *f, const char *s) {
  if (s && *s)
    dlc_json_str(f, s);
  else
    fputs("null", f);
}

/* A JSON number, or null for 0 (unknown). */
static void json_ms_or_null(FILE *f, long long v) {
  if (v > 0)
    fprintf(f, "%lld", v);
  else
    fputs("null", f);
}

/* Who a holder or waiter is: host, pid, program, client, checked_ms --
 * null each when its client's info key is unknown, never a fake 0. */
static void json_who(FILE *f, const ls_who *w) {
  fputs(",\"host\":", f);
  json_str_or_null(f, w->known ? w->host : NULL);
  fputs(",\"pid\":", f);
  json_ms_or_null(f, w->known ? w->pid : 0);
  fputs(",\"program\":", f);
  json_str_or_null(f, w->known ? w->program : NULL);
  fputs(",\"client\":", f);
  json_str_or_null(f, w->known ? w->client : NULL);
  fputs(",\"client_name\":", f);
  json_str_or_null(f, w->known ? w->name : NULL);
  fputs(",\"checked_ms\":", f);
  json_ms_or_null(f, w->known ? w->checked_ms : 0);
}

static void json_holder(FILE *f, const ls_holder *h, long long now) {
  fputs("{\"owner\":", f);
  dlc_json_str(f, h->owner);
  fputs(",\"mode\":", f);
  dlc_json_str(f, h->mode);
  fprintf(f, ",\"count\":%lld,\"alive\":%s", h->count,
          h->alive == 1   ? "true"
          : h->alive == 0 ? "false"
                          : "null");
  json_who(f, &h->who);
  if (h->since_ms > 0)
    fprintf(f, ",\"since_ms\":%lld,\"held_ms\":%lld", h->since_ms,
            now - h->since_ms);
  else
    fputs(",\"since_ms\":null,\"held_ms\":null", f);
  if (strcmp(h->mode, "permit") == 0)
    fprintf(f, ",\"expires_ms\":%lld", h->expires_ms);
  fputc('}', f);
}

static void json_waiter(FILE *f, const ls_waiter *w, long long now) {
  fputs("{\"owner\":", f);
  dlc_json_str(f, w->owner);
  fprintf(f, ",\"queue\":\"%s\",\"deadline_ms\":", w->queue);
  json_ms_or_null(f, w->deadline_ms);
  fprintf(f, ",\"alive\":%s", w->alive ? "true" : "false");
  json_who(f, &w->who);
  fputs(",\"since_ms\":", f);
  json_ms_or_null(f, w->since_ms);
  fputs(",\"waited_ms\":", f);
  if (w->since_ms > 0)
    fprintf(f, "%lld", now > w->since_ms ? now - w->since_ms : 0);
  else
    fputs("null", f);
  fputc('}', f);
}

static int counted(const ls_lock *l) {
  return strcmp(l->kind, "semaphore") == 0 || strcmp(l->kind, "permits") == 0 ||
         strcmp(l->kind, "latch") == 0 || strcmp(l->kind, "counter") == 0;
}

static void json_lock(FILE *f, const ls_lock *l, long long now) {
  fputs("{\"name\":", f);
  dlc_json_str(f, l->name);
  fprintf(f, ",\"kind\":\"%s\",\"node\":", l->kind);
  dlc_json_str(f, l->node);
  fprintf(f, ",\"ttl_ms\":%lld", l->ttl_ms);
  if (counted(l))
    fprintf(f, ",\"value\":%lld", l->value);
  fputs(",\"holders\":[", f);
  for (size_t i = 0; i < l->nholders; i++) {
    if (i)
      fputc(',', f);
    json_holder(f, &l->holders[i], now);
  }
  fputs("],\"waiters\":[", f);
  for (size_t i = 0; i < l->nwaiters; i++) {
    if (i)
      fputc(',', f);
    json_waiter(f, &l->waiters[i], now);
  }
  fprintf(f, "],\"subscribers\":%lld}", l->subscribers);
}

/* " host=H pid=P program=X" or what is known instead. */
static void text_who(FILE *f, const ls_who *w, int alive) {
  if (w->known)
    fprintf(f, " host=%s pid=%lld program=%s", w->host, w->pid, w->program);
  else if (alive == 0)
    fputs(" no client info (client dead, or not dlock)", f);
}

static void text_holder(FILE *f, const ls_holder *h, long long now) {
  fprintf(f, "  holder %s", h->owner);
  if (h->mode[0])
    fprintf(f, " (%s)", h->mode);
  if (h->count > 1)
    fprintf(f, " x%lld", h->count);
  text_who(f, &h->who, h->alive);
  if (h->since_ms > 0) {
    char iso[40], held[32];
    iso_ms(h->since_ms, iso, sizeof iso);
    cli_fmt_secs(now - h->since_ms, held, sizeof held);
    fprintf(f, " since=%s (%s s)", iso, held);
  }
  if (strcmp(h->mode, "permit") == 0) {
    if (h->expires_ms < 0) {
      fputs(" expires=never", f);
    } else {
      char iso[40];
      iso_ms(h->expires_ms, iso, sizeof iso);
      fprintf(f, " expires=%s", iso);
    }
  }
  fputc('\n', f);
}

static void text_waiter(FILE *f, const ls_waiter *w, long long now) {
  fprintf(f, "  waiter %s (%s)", w->owner,
          strcmp(w->queue, "none") == 0   ? "no queue"
          : strcmp(w->queue, "fair") == 0 ? "fair queue"
                                          : "handover queue");
  text_who(f, &w->who, w->alive);
  if (w->since_ms > 0) {
    char iso[40], d[32];
    iso_ms(w->since_ms, iso, sizeof iso);
    cli_fmt_secs(now > w->since_ms ? now - w->since_ms : 0, d, sizeof d);
    fprintf(f, " waiting since=%s (%s s)", iso, d);
  }
  if (w->deadline_ms > 0) {
    char in[32];
    cli_fmt_secs(w->deadline_ms - now, in, sizeof in);
    fprintf(f, " gives up in %s s", in);
  }
  fputc('\n', f);
}

static void text_lock(FILE *f, const ls_lock *l, long long now) {
  char ttl[32] = "none";
  if (l->ttl_ms >= 0)
    cli_fmt_secs(l->ttl_ms, ttl, sizeof ttl);
  fprintf(f, "%s  %s  ttl %s%s", l->name, l->kind, ttl,
          l->ttl_ms >= 0 ? " s" : "");
  if (counted(l))
    fprintf(f, "  %s %lld",
            strcmp(l->kind, "latch") == 0 ? "count" : "available", l->value);
  size_t named = l->nwaiters;
  long long w =
      l->subscribers > (long long)named ? l->subscribers : (long long)named;
  fprintf(f, "  holders %zu  waiters %lld", l->nholders, w);
  fprintf(f, "  node %s\n", l->node);
  for (size_t i = 0; i < l->nholders; i++)
    text_holder(f, &l->holders[i], now);
  for (size_t i = 0; i < l->nwaiters; i++)
    text_waiter(f, &l->waiters[i], now);
  if (l->subscribers > (long long)named)
    fprintf(f, "  %lld waiting client(s) subscribed\n",
            l->subscribers - (long long)named);
}

static void json_summary(FILE *f, const ls_result *r) {
  fprintf(f,
          "],\"keys_scanned\":%lld,\"nodes\":%zu,\"commands\":%lld,"
          "\"elapsed_ms\":%lld,\"truncated\":%s,\"errors\":[",
          r->keys_scanned, r->nnodes, r->commands, r->elapsed_ms,
          r->truncated ? "true" : "false");
  for (size_t i = 0; i < r->nerrors; i++) {
    fputs(i ? ",{\"node\":" : "{\"node\":", f);
    dlc_json_str(f, r->errors[i].node);
    fputs(",\"error\":", f);
    dlc_json_str(f, r->errors[i].why);
    fputc('}', f);
  }
  fputs("]}\n", f);
}

static int do_list(const obs_opts *o) {
  ls_result r;
  int rc = obs_scan(o, 0, &r);
  if (rc) {
    ls_free(&r);
    return rc;
  }
  long long now = ls_wall_ms();
  if (o->json) {
    fputs("{\"locks\":[", stdout);
    for (size_t i = 0; i < r.n; i++) {
      if (i)
        fputc(',', stdout);
      json_lock(stdout, &r.locks[i], now);
    }
    json_summary(stdout, &r);
  } else {
    for (size_t i = 0; i < r.n; i++)
      text_lock(stdout, &r.locks[i], now);
    fprintf(stdout,
            "%zu lock%s; %lld keys scanned on %zu node%s in %lld ms%s%s\n", r.n,
            r.n == 1 ? "" : "s", r.keys_scanned, r.nnodes,
            r.nnodes == 1 ? "" : "s", r.elapsed_ms,
            r.truncated ? " (stopped by --max-keys: incomplete)" : "",
            r.nerrors ? " (some masters failed: incomplete)" : "");
  }
  int ok = fflush(stdout) == 0;
  rc = obs_report_errors(&r); /* after the locks: one line per master */
  ls_free(&r);
  return rc ? rc : ok ? 0 : CLI_EX_SOFT;
}

/* ---- top ---------------------------------------------------------------- */

/* What top remembers of a lock between refreshes. */
typedef struct seen {
  char *name;
  char **owners; /* holders at the last refresh */
  size_t nowners;
  long long handovers; /* holder changes seen */
  double rate;         /* of the last refresh, per second */
  char **waiting;      /* waiters, with when first seen */
  long long *wait_since;
  size_t nwaiting;
  int live;
} seen;

static volatile sig_atomic_t g_stop;
static void on_sig(int sig) {
  (void)sig;
  g_stop = 1;
}

static seen *seen_get(seen **v, size_t *n, const char *name) {
  for (size_t i = 0; i < *n; i++)
    if (strcmp((*v)[i].name, name) == 0)
      return &(*v)[i];
  seen *nv = realloc(*v, (*n + 1) * sizeof *nv);
  if (!nv)
    return NULL;
  *v = nv;
  seen *s = &nv[(*n)++];
  memset(s, 0, sizeof *s);
  s->name = strdup(name);
  return s->name ? s : NULL;
}

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static int has(char **v, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i], s) == 0)
      return 1;
  return 0;
}

/* Updates s from l (now: monotonic ms); dt_ms since the last refresh. */
static void seen_update(seen *s, const ls_lock *l, long long now,
                        long long dt_ms, int first) {
  long long changes = 0;
  char **owners = calloc(l->nholders + 1, sizeof *owners);
  for (size_t i = 0; owners && i < l->nholders; i++) {
    owners[i] = strdup(l->holders[i].owner);
    if (!first && owners[i] && !has(s->owners, s->nowners, owners[i]))
      changes++;
  }
  strv_free(s->owners, s->nowners);
  s->owners = owners;
  s->nowners = owners ? l->nholders : 0;
  s->handovers += changes;
  s->rate = dt_ms > 0 ? (double)changes * 1000.0 / (double)dt_ms : 0;
  char **w = calloc(l->nwaiters + 1, sizeof *w);
  long long *ws = calloc(l->nwaiters + 1, sizeof *ws);
  for (size_t i = 0; w && ws && i < l->nwaiters; i++) {
    w[i] = strdup(l->waiters[i].owner);
    ws[i] = now;
    for (size_t j = 0; j < s->nwaiting; j++)
      if (w[i] && strcmp(s->waiting[j], w[i]) == 0)
        ws[i] = s->wait_since[j];
  }
  strv_free(s->waiting, s->nwaiting);
  free(s->wait_since);
  s->waiting = w;
  s->wait_since = ws;
  s->nwaiting = w && ws ? l->nwaiters : 0;
  s->live = 1;
}

typedef struct row {
  const ls_lock *l;
  seen *s;
  long long longest_ms;
  long long oldest_hold_ms;
} row;

static int row_cmp(const void *a, const void *b) {
  const row *x = a, *y = b;
  long long wx = (long long)x->l->nwaiters + x->l->subscribers,
            wy = (long long)y->l->nwaiters + y->l->subscribers;
  if (wx != wy)
    return wx > wy ? -1 : 1;
  if (x->s->rate != y->s->rate)
    return x->s->rate > y->s->rate ? -1 : 1;
  if (x->longest_ms != y->longest_ms)
    return x->longest_ms > y->longest_ms ? -1 : 1;
  return strcmp(x->l->name, y->l->name);
}

static void draw(FILE *f, int tty, const ls_result *r, row *rows, size_t n,
                 long long limit, long long refresh) {
  char iso[40];
  iso_ms(ls_wall_ms(), iso, sizeof iso);
  if (tty)
    fputs("\x1b[H\x1b[2J", f);
  char bad[64] = "";
  if (r->nerrors)
    snprintf(bad, sizeof bad, ", %zu of %zu masters FAILED", r->nerrors,
             r->nnodes);
  fprintf(f,
          "dlock top  %s  refresh %lld  %zu locks, %lld keys scanned in %lld "
          "ms%s%s\n",
          iso, refresh, r->n, r->keys_scanned, r->elapsed_ms, bad,
          tty ? "  (q quits)" : "");
  fprintf(f, "%-32s %-9s %5s %9s %7s %9s %9s\n", "NAME", "KIND", "HOLDS",
          "HANDOV/S", "WAITERS", "LONGEST_W", "OLDEST_H");
  for (size_t i = 0; i < n && (long long)i < limit; i++) {
    const row *w = &rows[i];
    char lw[32] = "-", oh[32] = "-";
    if (w->longest_ms > 0)
      cli_fmt_secs(w->longest_ms, lw, sizeof lw);
    if (w->oldest_hold_ms > 0)
      cli_fmt_secs(w->oldest_hold_ms, oh, sizeof oh);
    fprintf(f, "%-32.32s %-9s %5zu %9.2f %7lld %9s %9s\n", w->l->name,
            w->l->kind, w->l->nholders, w->s->rate,
            (long long)w->l->nwaiters + w->l->subscribers, lw, oh);
  }
  fflush(f);
}

/* Waits up to ms for q on stdin (tty) or a signal. 1: stop. */
static int pause_for(long long ms, int tty) {
  long long end = dlc_now_ms() + ms;
  while (!g_stop) {
    long long left = end - dlc_now_ms();
    if (left <= 0)
      return 0;
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    int k = poll(&p, tty ? 1 : 0, (int)(left > 200 ? 200 : left));
    if (k > 0 && (p.revents & POLLIN)) {
      char ch = 0;
      if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
        return 1;
    }
  }
  return 1;
}

/* The rows of one refresh: each lock's longest wait (from when each wait
 * began, as its queue or its client's info key dates it; a waiter nothing
 * dates, from when top first saw it) and oldest hold. NULL on OOM. */
static row *top_rows(const ls_result *r, seen **sv, size_t *ns, long long now,
                     long long dt, int first, size_t *nr) {
  long long wall = ls_wall_ms();
  row *rows = calloc(r->n + 1, sizeof *rows);
  *nr = 0;
  for (size_t i = 0; rows && i < r->n; i++) {
    const ls_lock *l = &r->locks[i];
    seen *s = seen_get(sv, ns, l->name);
    if (!s)
      continue;
    seen_update(s, l, now, dt, first);
    row *w = &rows[(*nr)++];
    w->l = l;
    for (size_t j = 0; j < l->nwaiters; j++) {
      long long d = 0;
      if (l->waiters[j].since_ms > 0)
        d = wall - l->waiters[j].since_ms;
      else
        for (size_t k = 0; k < s->nwaiting; k++)
          if (strcmp(s->waiting[k], l->waiters[j].owner) == 0)
            d = now - s->wait_since[k];
      if (d > w->longest_ms)
        w->longest_ms = d;
    }
    for (size_t j = 0; j < l->nholders; j++) {
      long long since = l->holders[j].since_ms;
      if (since > 0 && wall - since > w->oldest_hold_ms)
        w->oldest_hold_ms = wall - since;
    }
  }
  /* pointers into sv moved if it grew: find them again */
  for (size_t i = 0; i < *nr; i++)
    rows[i].s = seen_get(sv, ns, rows[i].l->name);
  if (*nr)
    qsort(rows, *nr, sizeof *rows, row_cmp);
  return rows;
}

/* Raw keys on a terminal (q quits); the old mode into *saved. */
static int tty_raw(struct termios *saved) {
  if (tcgetattr(STDIN_FILENO, saved) != 0)
    return 0;
  struct termios t = *saved;
  t.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
  t.c_cc[VMIN] = 0;
  t.c_cc[VTIME] = 0;
  return tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
}

static int do_top(const obs_opts *o) {
  int tty = isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
  struct termios saved;
  int raw = tty && tty_raw(&saved);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  long long limit = o->limit;
  struct winsize ws;
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 3 &&
      ws.ws_row - 3 < limit)
    limit = ws.ws_row - 3;
  seen *sv = NULL;
  size_t ns = 0;
  int ex = 0;
  long long last = 0;
  for (long long k = 1; !g_stop && (o->count == 0 || k <= o->count); k++) {
    ls_result r;
    if ((ex = obs_scan(o, o->interval_ms * 5, &r)) != 0) {
      ls_free(&r);
      break;
    }
    long long now = dlc_now_ms(), dt = last ? now - last : 0;
    last = now;
    for (size_t i = 0; i < ns; i++)
      sv[i].live = 0;
    size_t nr = 0;
    row *rows = top_rows(&r, &sv, &ns, now, dt, k == 1, &nr);
    draw(stdout, tty, &r, rows, nr, limit, k);
    ex = obs_report_errors(&r); /* the masters that failed, each refresh */
    free(rows);
    ls_free(&r);
    if ((o->count == 0 || k < o->count) && pause_for(o->interval_ms, tty))
      break;
  }
  for (size_t i = 0; i < ns; i++) {
    free(sv[i].name);
    strv_free(sv[i].owners, sv[i].nowners);
    strv_free(sv[i].waiting, sv[i].nwaiting);
    free(sv[i].wait_since);
  }
  free(sv);
  if (raw)
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return ex;
}

int cli_obs_dispatch(int argc, char **argv, int *exit_code) {
  obs_opts o;
  char err[512];
  int rc = obs_parse(argc, argv, &o, err, sizeof err);
  if (rc > 0)
    return 0; /* not ours */
  if (rc < 0) {
    cli_err("%s (see dlock %s --help)", err, o.cmd ? o.cmd : "list");
    *exit_code = CLI_EX_USAGE;
    return 1;
  }
  if (o.help) {
    usage(stdout, o.cmd);
    *exit_code = fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
    return 1;
  }
  /* the long-running ones stamp every line they log */
  cli_stamped = strcmp(o.cmd, "list") != 0;
  cli_opts co;
  dlock_client *c = NULL;
  int ex = obs_connect(&o, &co, &c);
  if (ex == OBS_ETCD) /* etcd_admin.c */
    ex = cli_etcd_obs(o.cmd, o.pattern, o.json, &co);
  else if (ex == 0)
    ex = strcmp(o.cmd, "list") == 0  ? do_list(&o)
         : strcmp(o.cmd, "top") == 0 ? do_top(&o)
                                     : cli_exporter(&o);
  dlock_admin_free(o.admin);
  dlock_client_free(c);
  dlock_config_dispose(&co.cfg);
  *exit_code = ex;
  return 1;
}
