/* rconn.c -- plain hiredis connections for the naive strategies and the
 * checks, and clocks. Accepts the two URL forms dlock accepts:
 *   redis://[[user]:password@]host[:port][/db]
 *   unix:///path/to/socket[?db=N&password=...&user=...]
 * (no percent-decoding: the lab needs nothing fancier). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seckill.h"

long long sk_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

long long sk_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void sk_sleep_us(long long us) {
  if (us <= 0)
    return;
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

typedef struct url_parts {
  char host[256];
  int port;
  char path[256];
  char user[128];
  char pass[256];
  int db;
} url_parts;

static void copy_n(char *dst, size_t cap, const char *s, size_t n) {
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, s, n);
  dst[n] = '\0';
}

/* query "db=N&password=P&user=U" of a unix URL */
static void parse_query(url_parts *u, const char *q) {
  while (q && *q) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    if (n > 3 && strncmp(q, "db=", 3) == 0)
      u->db = atoi(q + 3);
    else if (n > 9 && strncmp(q, "password=", 9) == 0)
      copy_n(u->pass, sizeof u->pass, q + 9, n - 9);
    else if (n > 5 && strncmp(q, "user=", 5) == 0)
      copy_n(u->user, sizeof u->user, q + 5, n - 5);
    q = amp ? amp + 1 : NULL;
  }
}

static int parse_url(const char *url, url_parts *u, char *err, size_t el) {
  memset(u, 0, sizeof *u);
  u->port = 6379;
  if (strncmp(url, "unix://", 7) == 0) {
    const char *p = url + 7;
    const char *q = strchr(p, '?');
    copy_n(u->path, sizeof u->path, p, q ? (size_t)(q - p) : strlen(p));
    if (!u->path[0]) {
      snprintf(err, el, "unix URL without a socket path");
      return -1;
    }
    parse_query(u, q ? q + 1 : NULL);
    return 0;
  }
  if (strncmp(url, "redis://", 8) != 0) {
    snprintf(err, el, "URL must start with redis:// or unix://");
    return -1;
  }
  const char *p = url + 8;
  const char *at = strrchr(p, '@');
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon) {
      copy_n(u->user, sizeof u->user, p, (size_t)(colon - p));
      copy_n(u->pass, sizeof u->pass, colon + 1, (size_t)(at - colon - 1));
    } else {
      copy_n(u->pass, sizeof u->pass, p, (size_t)(at - p));
    }
    p = at + 1;
  }
  const char *slash = strchr(p, '/');
  size_t hl = slash ? (size_t)(slash - p) : strlen(p);
  const char *colon = memchr(p, ':', hl);
  if (colon) {
    copy_n(u->host, sizeof u->host, p, (size_t)(colon - p));
    u->port = atoi(colon + 1);
  } else {
    copy_n(u->host, sizeof u->host, p, hl);
  }
  if (!u->host[0])
    snprintf(u->host, sizeof u->host, "127.0.0.1");
  if (slash && slash[1])
    u->db = atoi(slash + 1);
  if (u->port <= 0 || u->port > 65535) {
    snprintf(err, el, "bad port in the URL");
    return -1;
  }
  return 0;
}

static int ok_reply(redisContext *c, redisReply *r, char *err, size_t el,
                    const char *what) {
  int ok = r && r->type != REDIS_REPLY_ERROR;
  if (!ok)
    snprintf(err, el, "%s: %s", what,
             r ? r->str : (c->errstr[0] ? c->errstr : "no reply"));
  if (r)
    freeReplyObject(r);
  return ok;
}

redisContext *sk_connect(const char *url, char *err, size_t el) {
  url_parts u;
  if (parse_url(url, &u, err, el) != 0)
    return NULL;
  struct timeval tv = {5, 0};
  redisContext *c = u.path[0] ? redisConnectUnixWithTimeout(u.path, tv)
                              : redisConnectWithTimeout(u.host, u.port, tv);
  if (!c || c->err) {
    snprintf(err, el, "%s", c ? c->errstr : "out of memory");
    if (c)
      redisFree(c);
    return NULL;
  }
  struct timeval ct = {10, 0};
  redisSetTimeout(c, ct);
  if (u.pass[0]) {
    redisReply *r = u.user[0] ? redisCommand(c, "AUTH %s %s", u.user, u.pass)
                              : redisCommand(c, "AUTH %s", u.pass);
    if (!ok_reply(c, r, err, el, "AUTH")) {
      redisFree(c);
      return NULL;
    }
  }
  if (u.db) {
    redisReply *r = redisCommand(c, "SELECT %d", u.db);
    if (!ok_reply(c, r, err, el, "SELECT")) {
      redisFree(c);
      return NULL;
    }
  }
  return c;
}
