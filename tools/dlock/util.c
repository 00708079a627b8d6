/* util.c -- messages, exit codes, the client policy, formatting seconds. */
#include <errno.h>
#include <stdint.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "url.h"

int cli_stamped;

static void vmsg(const char *fmt, va_list ap) {
  char line[2048], when[48] = "";
  vsnprintf(line, sizeof line, fmt, ap);
  if (cli_stamped) {
    char t[40];
    cli_stamp(t, sizeof t);
    snprintf(when, sizeof when, "%s ", t);
  }
  /* One write, so lines from concurrent dlock processes do not mix. */
  fprintf(stderr, "%sdlock: %s\n", when, line);
  fflush(stderr);
}

void cli_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vmsg(fmt, ap);
  va_end(ap);
}

void cli_note(const cli_opts *o, const char *fmt, ...) {
  if (o->quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  vmsg(fmt, ap);
  va_end(ap);
}

void cli_stamp(char *buf, size_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char s[32];
  strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
  int ms = (int)(ts.tv_nsec / 1000000L); /* 0..999 */
  if (snprintf(buf, len, "%s.%03dZ", s, ms) < 0 && len > 0)
    buf[0] = '\0';
}

void cli_debug(const cli_opts *o, const char *fmt, ...) {
  if (!o->verbose)
    return;
  char line[2048], when[40];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  cli_stamp(when, sizeof when);
  /* -v lines carry the time (ISO 8601, UTC, ms): one write per line. */
  fprintf(stderr, "%s dlock: %s\n", when, line);
  fflush(stderr);
}

/* -v: the library's events (dlock_config.log_fn), timestamped like the
 * -v lines. Any thread. */
static void cli_log_hook(void *arg, int level, const char *name,
                         const char *event, const char *msg) {
  (void)arg;
  static const char *const lv[] = {"?", "ERROR", "WARN", "INFO", "DEBUG"};
  char when[40];
  cli_stamp(when, sizeof when);
  if (strcmp(event, "config_ignored") == 0)
    fprintf(stderr, "%s dlock: %s\n", when, msg); /* a -v settings line */
  else if (name)
    fprintf(stderr, "%s dlock: %s %s '%s': %s\n", when,
            lv[level >= 1 && level <= 4 ? level : 0], event, name, msg);
  else
    fprintf(stderr, "%s dlock: %s %s: %s\n", when,
            lv[level >= 1 && level <= 4 ? level : 0], event, msg);
  fflush(stderr);
}

static const char *env_value(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* The environment and the flags over the file's values; returns where the
 * URL came from. */
static const char *apply_flags(const cli_opts *o, dlock_config *cfg,
                               const char *file) {
  const char *env = env_value("DLOCK_URL"), *from = "--url";
  if (!o->url && env)
    from = "$DLOCK_URL";
  else if (!o->url)
    from = cfg->url ? file : "the default";
  cfg->url = o->url     ? o->url
             : env      ? env
             : cfg->url ? cfg->url
                        : CLI_DEFAULT_URL;
  if (o->tls_ca)
    cfg->tls_ca_file = o->tls_ca;
  if (o->tls_cert)
    cfg->tls_cert_file = o->tls_cert;
  if (o->tls_key)
    cfg->tls_key_file = o->tls_key;
  if (o->tls_insecure)
    cfg->tls_verify = 0;
  if (o->call_timeout_ms >= 0) /* 0: the whole retry policy */
    cfg->call_timeout_ms =
        o->call_timeout_ms > INT32_MAX ? INT32_MAX : (int)o->call_timeout_ms;
  cfg->watchdog_timeout_ms = (int)o->watchdog_ms;
  return from;
}

/* -v, when a file or a TLS flag is in play: what the settings came to. */
static void show_settings(const cli_opts *o, const char *file,
                          const char *from) {
  const dlock_config *cfg = &o->cfg;
  if (!file && !o->tls_ca && !o->tls_cert && !o->tls_key && !o->tls_insecure)
    return;
  char red[1024];
  dlc_url_redact(cfg->url, red, sizeof red);
  char ca[1100];
  if (cfg->tls_truststore) /* a PKCS12 store, with the PEM file if set */
    snprintf(ca, sizeof ca, "%s%s%s (PKCS12)",
             cfg->tls_ca_file ? cfg->tls_ca_file : "",
             cfg->tls_ca_file ? " and " : "", cfg->tls_truststore);
  else
    snprintf(ca, sizeof ca, "%s",
             cfg->tls_ca_file ? cfg->tls_ca_file : "(system)");
  cli_debug(o,
            "settings: %s (from %s), TLS CA %s, certificate %s, key %s, "
            "verify %s",
            red, from, ca, cfg->tls_cert_file ? cfg->tls_cert_file : "(none)",
            cfg->tls_key_file ? cfg->tls_key_file : "(none)",
            cfg->tls_verify == DLOCK_TLS_VERIFY_NONE      ? "OFF"
            : cfg->tls_verify == DLOCK_TLS_VERIFY_CA_ONLY ? "CA only (no name)"
                                                          : "on");
}

int cli_settings(cli_opts *o) {
  dlock_config *cfg = &o->cfg;
  dlock_config_init(cfg);
  /* A CLI should say "unreachable" within seconds, not after the library's
   * service-oriented defaults (10 s connect, 3 tries 1.5 s apart): 2 s per
   * connection attempt, 3 tries 0.25 s apart. command_timeout_ms 0: a third
   * of the lease (cli_connect), unless the file sets one. */
  cfg->connect_timeout_ms = 2000;
  cfg->command_timeout_ms = 0;
  cfg->retry_attempts = 2;
  cfg->retry_interval_ms = 250;
  cfg->watchdog_timeout_ms = (int)o->watchdog_ms;
  cfg->pool_size = 4;
  const char *file = o->config ? o->config : env_value("DLOCK_CONFIG");
  int rc = file ? dlock_config_load(file, cfg) : 0;
  /* dlock's own settings, in a file Redisson never reads (docs/config.md) */
  const char *extra = env_value("DLOCK_CONFIG_EXTRA");
  if (rc == 0 && extra) {
    rc = dlock_config_load(extra, cfg);
    file = file ? file : extra;
  }
  if (o->verbose && !cfg->log_fn) {
    /* the library's events, the config's ignored settings among them */
    cfg->log_fn = cli_log_hook;
    cfg->log_level = DLOCK_LOG_INFO;
  }
  if (rc) {
    cli_err("%s", dlock_last_error());
    return cli_exit_code(rc);
  }
  if (!o->watchdog_set)
    o->watchdog_ms = cfg->watchdog_timeout_ms;
  show_settings(o, file, apply_flags(o, cfg, file));
  if (!cfg->tls_verify)
    cli_err("warning: TLS certificates are not verified (%s): anyone on the "
            "network path can impersonate the server",
            o->tls_insecure ? "--tls-insecure" : file);
  return 0;
}

const char *cli_url(const cli_opts *o) { return o->cfg.url; }

void cli_detail(const char *url, char *buf, size_t len) {
  cli_redact(url, dlock_last_error(), buf, len);
}

/* The library's field names in a message, in the CLI's terms (a setting
 * from a config file is named by its key by the library itself). */
static void cli_terms(char *buf, size_t len) {
  static const char *const map[][2] = {
      {"tls_cert_file and tls_key_file", "--tls-cert and --tls-key"},
      {"tls_cert_file", "--tls-cert"},
      {"tls_key_file", "--tls-key"},
      {"tls_ca_file", "--tls-ca"},
      {"call_timeout_ms", "--call-timeout"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    char *hit;
    for (int n = 0; n < 4 && (hit = strstr(buf, map[i][0])) != NULL; n++) {
      size_t fl = strlen(map[i][0]), tl = strlen(map[i][1]);
      size_t rest = strlen(hit + fl);
      if ((size_t)(hit - buf) + tl + rest + 1 > len)
        break;
      memmove(hit + tl, hit + fl, rest + 1);
      memcpy(hit, map[i][1], tl);
    }
  }
}

void cli_redact(const char *url, const char *d, char *buf, size_t len) {
  char red[1024];
  dlc_url_redact(url, red, sizeof red);
  const char *hit = *url ? strstr(d, url) : NULL;
  if (!hit || strcmp(red, url) == 0)
    snprintf(buf, len, "%s", d);
  else
    snprintf(buf, len, "%.*s%s%s", (int)(hit - d), d, red, hit + strlen(url));
  cli_terms(buf, len);
}

void cli_say_failed(const char *url, int exit_code, const char *why) {
  char red[1024], det[2048];
  dlc_url_redact(url, red, sizeof red);
  cli_redact(url, why, det, sizeof det);
  if (exit_code == CLI_EX_UNAVAIL)
    cli_err("cannot reach Redis at %s: %s", red, det);
  else if (exit_code == CLI_EX_AUTH)
    cli_err("Redis at %s refused us: %s", red, det);
  else
    cli_err("cannot use Redis at %s: %s", red, det);
}

int cli_exit_code(int rc) {
  switch (rc) {
  case DLOCK_EINVAL:
  case DLOCK_ENOTSUP:
    return CLI_EX_USAGE;
  case DLOCK_ECONN:
    return CLI_EX_UNAVAIL;
  case DLOCK_EAUTH:
  case DLOCK_ETLS:
    return CLI_EX_AUTH;
  case DLOCK_ELOST:
    return CLI_EX_LOST;
  case DLOCK_EREDIS:
    /* An ACL that does not allow a command, key or channel: a permission
     * problem like a refused password, not a bug (sysexits EX_NOPERM). */
    if (strstr(dlock_last_error(), "NOPERM"))
      return CLI_EX_AUTH;
    return CLI_EX_SOFT;
  default:
    return CLI_EX_SOFT;
  }
}

/* dlock_client_new on a thread of its own, so that the caller can stop
 * waiting for it at a deadline: the library bounds each connection attempt
 * and each reply, but not the sum of the attempts (nor a name lookup). */
typedef struct creation {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dlock_config cfg;
  int done, rc;
  dlock_client *c;
  char err[2048]; /* its dlock_last_error(): thread-local */
} creation;

static void *create_main(void *arg) {
  creation *cr = arg;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cr->cfg, &c);
  pthread_mutex_lock(&cr->mu);
  cr->rc = rc;
  cr->c = c;
  snprintf(cr->err, sizeof cr->err, "%s", rc ? dlock_last_error() : "");
  cr->done = 1;
  pthread_cond_signal(&cr->cv);
  pthread_mutex_unlock(&cr->mu);
  return NULL;
}

/* 0 with *out, a DLOCK_E* code (the detail in err), or 1: the deadline
 * (CLOCK_MONOTONIC, ms) came first. */
static int create_by(const dlock_config *cfg, long long deadline_ms,
                     dlock_client **out, char *err, size_t errlen) {
  /* On the heap: when the deadline comes first, the thread goes on using
   * it until the process exits. */
  creation *cr = calloc(1, sizeof *cr);
  if (!cr) {
    snprintf(err, errlen, "out of memory");
    return DLOCK_ENOMEM;
  }
  cr->cfg = *cfg;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&cr->mu, NULL);
  pthread_cond_init(&cr->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t t;
  int rc;
  if (pthread_create(&t, NULL, create_main, cr) != 0) {
    rc = dlock_client_new(cfg, out); /* no thread: unbounded */
    snprintf(err, errlen, "%s", rc ? dlock_last_error() : "");
  } else {
    struct timespec ts = {(time_t)(deadline_ms / 1000),
                          (long)(deadline_ms % 1000) * 1000000L};
    pthread_mutex_lock(&cr->mu);
    while (!cr->done)
      if (pthread_cond_timedwait(&cr->cv, &cr->mu, &ts) == ETIMEDOUT)
        break;
    int done = cr->done;
    pthread_mutex_unlock(&cr->mu);
    if (!done) {
      /* the caller exits at once; the thread still uses cr. Detached, so
       * that nothing waits for it (and no thread is left unjoined). */
      pthread_detach(t);
      return 1;
    }
    pthread_join(t, NULL);
    *out = cr->c;
    snprintf(err, errlen, "%s", cr->err);
    rc = cr->rc;
  }
  pthread_mutex_destroy(&cr->mu);
  pthread_cond_destroy(&cr->cv);
  free(cr);
  return rc;
}

int cli_connect(const cli_opts *o, long long lease_ms, long long deadline_ms,
                void (*on_lost)(const char *, void *), void *arg,
                dlock_client **out) {
  const char *url = cli_url(o);
  dlock_config cfg = o->cfg; /* cli_settings */
  /* Unless the config file sets it, a reply must come within a third of
   * the lease (0.25..2 s) so that a slow server is noticed while the lease
   * still has time left. */
  long long ct = lease_ms / 3;
  if (cfg.command_timeout_ms == 0)
    cfg.command_timeout_ms = (int)(ct < 250 ? 250 : ct > 2000 ? 2000 : ct);
  cfg.on_lock_lost = on_lost;
  cfg.on_lock_lost_arg = arg;
  if (o->verbose && !cfg.log_fn) {
    /* renewal failures, reconnects, failovers, losses as they happen */
    cfg.log_fn = cli_log_hook;
    cfg.log_level = DLOCK_LOG_INFO;
  }
  char red[1024], det[2048], raw[2048];
  dlc_url_redact(url, red, sizeof red);
  int rc;
  if (deadline_ms < 0) {
    rc = dlock_client_new(&cfg, out);
    snprintf(raw, sizeof raw, "%s", rc ? dlock_last_error() : "");
  } else {
    rc = create_by(&cfg, deadline_ms, out, raw, sizeof raw);
  }
  if (rc == 0)
    return 0;
  if (rc == 1) {
    /* -w ran out while connecting: the connection thread is still in the
     * library, using this stack's settings, so leave now, without the
     * usual cleanup (nothing is held, no command was started). */
    char w[32];
    cli_fmt_secs(o->wait_ms, w, sizeof w);
    cli_err("cannot reach Redis at %s: no connection within the %s s of -w",
            red, w);
    fflush(NULL);
    _exit(CLI_EX_UNAVAIL);
  }
  cli_redact(url, raw, det, sizeof det);
  switch (rc) {
  case DLOCK_EINVAL:
    cli_err("%s", det);
    break;
  case DLOCK_ECONN:
    if (strstr(det, "too many open files"))
      cli_err("cannot connect to Redis at %s: %s", red, det);
    else
      cli_err("cannot reach Redis at %s: %s", red, det);
    break;
  case DLOCK_EAUTH:
    cli_err("Redis at %s refused authentication: %s", red, det);
    break;
  case DLOCK_ETLS:
    cli_err("TLS with Redis at %s failed: %s", red, det);
    break;
  default:
    cli_err("cannot use Redis at %s: %s (%s)", red, det, dlock_err_name(rc));
    break;
  }
  return cli_exit_code(rc);
}

void cli_fmt_secs(long long ms, char *buf, size_t len) {
  if (ms % 1000 == 0)
    snprintf(buf, len, "%lld", ms / 1000);
  else if (ms % 100 == 0)
    snprintf(buf, len, "%lld.%lld", ms / 1000, (ms % 1000) / 100);
  else if (ms % 10 == 0)
    snprintf(buf, len, "%lld.%02lld", ms / 1000, (ms % 1000) / 10);
  else
    snprintf(buf, len, "%lld.%03lld", ms / 1000, ms % 1000);
}
