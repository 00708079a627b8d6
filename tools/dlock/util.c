/* util.c -- messages, exit codes, the client policy, JSON, URL redaction. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void vmsg(const char *fmt, va_list ap) {
  char line[2048];
  vsnprintf(line, sizeof line, fmt, ap);
  /* One write, so lines from concurrent dlock processes do not mix. */
  fprintf(stderr, "dlock: %s\n", line);
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

void cli_debug(const cli_opts *o, const char *fmt, ...) {
  if (!o->verbose)
    return;
  va_list ap;
  va_start(ap, fmt);
  vmsg(fmt, ap);
  va_end(ap);
}

long long cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *cli_url(const cli_opts *o) {
  if (o->url)
    return o->url;
  const char *env = getenv("DLOCK_URL");
  if (env && *env)
    return env;
  return CLI_DEFAULT_URL;
}

void cli_redact_url(const char *url, char *buf, size_t len) {
  snprintf(buf, len, "%s", url);
  char *scheme = strstr(buf, "://");
  if (!scheme)
    return;
  char *auth = scheme + 3;
  /* redis://user:PASSWORD@host -> redis://user:***@host */
  size_t alen = strcspn(auth, "/?#");
  char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@')
      at = auth + i;
  if (at) {
    char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon) {
      char tail[1024];
      snprintf(tail, sizeof tail, "%s", at);
      snprintf(colon + 1, len - (size_t)(colon + 1 - buf), "***%s", tail);
    }
  }
  /* unix:///path?password=SECRET&db=1 */
  char *q = strchr(buf, '?');
  while (q) {
    char *p = strstr(q, "password=");
    if (!p)
      break;
    p += 9;
    size_t n = strcspn(p, "&");
    char tail[1024];
    snprintf(tail, sizeof tail, "%s", p + n);
    snprintf(p, len - (size_t)(p - buf), "***%s", tail);
    q = p + 3;
  }
}

void cli_detail(const char *url, char *buf, size_t len) {
  const char *d = dlock_last_error();
  char red[1024];
  cli_redact_url(url, red, sizeof red);
  const char *hit = *url ? strstr(d, url) : NULL;
  if (!hit || strcmp(red, url) == 0) {
    snprintf(buf, len, "%s", d);
    return;
  }
  snprintf(buf, len, "%.*s%s%s", (int)(hit - d), d, red, hit + strlen(url));
}

int cli_exit_code(int rc) {
  switch (rc) {
  case DLOCK_EINVAL:
  case DLOCK_ENOTSUP:
    return CLI_EX_USAGE;
  case DLOCK_ECONN:
    return CLI_EX_UNAVAIL;
  case DLOCK_EAUTH:
    return CLI_EX_AUTH;
  case DLOCK_ELOST:
    return CLI_EX_LOST;
  default:
    return CLI_EX_SOFT;
  }
}

int cli_connect(const cli_opts *o, long long lease_ms,
                void (*on_lost)(const char *, void *), void *arg,
                dlock_client **out) {
  const char *url = cli_url(o);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  /* A CLI should say "unreachable" within seconds, not after the library's
   * service-oriented defaults (10 s connect, 3 tries 1.5 s apart): 2 s per
   * connection attempt, 3 tries 0.25 s apart. A reply must come within a
   * third of the lease (0.25..2 s) so that a slow server is noticed while
   * the lease still has time left. */
  long long ct = lease_ms / 3;
  cfg.connect_timeout_ms = 2000;
  cfg.command_timeout_ms = (int)(ct < 250 ? 250 : ct > 2000 ? 2000 : ct);
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 250;
  cfg.watchdog_timeout_ms = (int)o->watchdog_ms;
  cfg.pool_size = 4;
  cfg.on_lock_lost = on_lost;
  cfg.on_lock_lost_arg = arg;
  int rc = dlock_client_new(&cfg, out);
  if (rc == 0)
    return 0;
  char red[1024], det[2048];
  cli_redact_url(url, red, sizeof red);
  cli_detail(url, det, sizeof det);
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
  default:
    cli_err("cannot use Redis at %s: %s (%s)", red, det, dlock_err_name(rc));
    break;
  }
  return cli_exit_code(rc);
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if the bytes there
 * are not one (stray continuation, overlong, surrogate, past U+10FFFF). */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80)
    return 1;
  size_t n = c >= 0xc2 && c <= 0xdf   ? 2
             : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4
                                      : 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
      (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
    return 0;
  return n;
}

void cli_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p >= 0x80) {
      /* JSON text is Unicode: a byte that is not part of valid UTF-8 (a
       * key name can hold any bytes) becomes U+FFFD, so the output always
       * parses. */
      size_t n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", f);
      } else {
        fwrite(p, 1, n, f);
        p += n - 1;
      }
      continue;
    }
    switch (*p) {
    case '"':
      fputs("\\\"", f);
      break;
    case '\\':
      fputs("\\\\", f);
      break;
    case '\n':
      fputs("\\n", f);
      break;
    case '\r':
      fputs("\\r", f);
      break;
    case '\t':
      fputs("\\t", f);
      break;
    default:
      if (*p < 0x20)
        fprintf(f, "\\u%04x", *p);
      else
        fputc(*p, f);
    }
  }
  fputc('"', f);
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
