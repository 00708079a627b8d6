/*
 * url.c -- the tools' side of URL handling (see url.h): a wrapper around
 * the library's internal parser (src/proto/url.c, compiled into this layer),
 * the redaction used in messages, and connecting hiredis to a URL.
 *
 * src/proto/url.c reports through three internal helpers of the library; the
 * tools link the shared library, which does not export them, so the ones
 * below stand in (same contracts as src/util/error.c and src/util/strbuf.c).
 */
#include "url.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

/* ---- what src/proto/url.c needs from the library ------------------------- */

static _Thread_local char t_urlerr[512];

int dlock__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_urlerr, sizeof t_urlerr, fmt, ap);
  va_end(ap);
  return err;
}

void *dlock__malloc(size_t n) { return malloc(n ? n : 1); }

void *dlock__calloc(size_t n, size_t m) { return calloc(n ? n : 1, m ? m : 1); }

char *dlock__strdup(const char *s) { return dlock__strndup(s, strlen(s)); }

char *dlock__strndup(const char *s, size_t n) {
  char *p = dlock__malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* ---- parsing ------------------------------------------------------------ */

int dlc_url_parse(const char *url, dlc_url *u, char *err, size_t errlen) {
  dlock__url in;
  memset(u, 0, sizeof *u);
  t_urlerr[0] = '\0';
  if (dlock__url_parse(url, &in) != 0) {
    snprintf(err, errlen, "%s", t_urlerr);
    return -1;
  }
  u->is_unix = in.is_unix;
  u->host = in.host;
  u->port = in.port;
  u->path = in.path;
  u->user = in.user;
  u->password = in.password;
  u->db = in.db;
  u->cluster = in.cluster;
  u->sentinel = in.sentinel;
  /* The seed list and the sentinel part stay with the library's struct:
   * freed here. */
  in.host = in.path = in.user = in.password = NULL;
  dlock__url_free(&in);
  return 0;
}

/* Asks the sentinels of a redis-sentinel:// URL in turn for the master's
 * address: 0 with host (in buf) and *port, or -1 with why in err. */
static int sentinel_master(const dlock__url *in, int connect_s, char *buf,
                           size_t n, int *port, char *err, size_t errlen) {
  snprintf(err, errlen, "no sentinel answered");
  for (int i = 0; i < in->n_sentinels; i++) {
    struct timeval tv = {connect_s, 0};
    redisContext *c = redisConnectWithTimeout(in->sentinels[i].host,
                                              in->sentinels[i].port, tv);
    redisReply *r = NULL;
    if (c && !c->err && in->sentinel_password) {
      r = in->sentinel_user ? redisCommand(c, "AUTH %s %s", in->sentinel_user,
                                           in->sentinel_password)
                            : redisCommand(c, "AUTH %s", in->sentinel_password);
      if (r)
        freeReplyObject(r);
    }
    if (c && !c->err)
      r = redisCommand(c, "SENTINEL GET-MASTER-ADDR-BY-NAME %s",
                       in->master_name);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (ok) {
      snprintf(buf, n, "%s", r->element[0]->str);
      *port = atoi(r->element[1]->str);
    } else {
      snprintf(err, errlen, "sentinel %s:%d: %s", in->sentinels[i].host,
               in->sentinels[i].port,
               !c || c->err ? (c ? c->errstr : "out of memory")
               : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                   : "no master of that name");
    }
    if (r)
      freeReplyObject(r);
    if (c)
      redisFree(c);
    if (ok)
      return 0;
  }
  return -1;
}

void dlc_url_free(dlc_url *u) {
  free(u->host);
  free(u->path);
  free(u->user);
  free(u->password);
  memset(u, 0, sizeof *u);
}

void dlc_url_redact(const char *url, char *buf, size_t len) {
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

/* ---- connecting --------------------------------------------------------- */

/* 1 if r is a reply other than an error; else writes why into err. Frees
 * r. */
static int ok_reply(redisContext *c, redisReply *r, const char *what, char *err,
                    size_t errlen) {
  int ok = r && r->type != REDIS_REPLY_ERROR;
  if (!ok)
    snprintf(err, errlen, "%s: %s", what,
             r ? r->str : (c->errstr[0] ? c->errstr : "no reply"));
  if (r)
    freeReplyObject(r);
  return ok;
}

/* AUTH and SELECT as u says. 0 or -1 (err written). */
static int login(redisContext *c, const dlc_url *u, char *err, size_t el) {
  if (u->password) {
    redisReply *r = u->user
                        ? redisCommand(c, "AUTH %s %s", u->user, u->password)
                        : redisCommand(c, "AUTH %s", u->password);
    if (!ok_reply(c, r, "AUTH", err, el))
      return -1;
  }
  if (u->db &&
      !ok_reply(c, redisCommand(c, "SELECT %d", u->db), "SELECT", err, el))
    return -1;
  return 0;
}

/* A cluster's master serving key, as c (a node of it) says: host into buf
 * and *port. 0, or -1 with err set. */
static int cluster_master(redisContext *c, const char *key, char *buf, size_t n,
                          int *port, char *err, size_t el) {
  redisReply *s = redisCommand(c, "CLUSTER KEYSLOT %s", key);
  long long slot = s && s->type == REDIS_REPLY_INTEGER ? s->integer : -1;
  if (s)
    freeReplyObject(s);
  redisReply *r = slot < 0 ? NULL : redisCommand(c, "CLUSTER SLOTS");
  int found = 0;
  for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements;
       i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || e->element[0]->integer > slot ||
        slot > e->element[1]->integer)
      continue;
    snprintf(buf, n, "%s", e->element[2]->element[0]->str);
    *port = (int)e->element[2]->element[1]->integer;
    found = 1;
  }
  if (r)
    freeReplyObject(r);
  if (!found)
    snprintf(err, el, "the cluster names no master for '%s'", key);
  return found ? 0 : -1;
}

static redisContext *connect_url(const char *url, const char *host, int port,
                                 int connect_s, int cmd_s, char *err,
                                 size_t errlen);

redisContext *dlc_redis_connect_key(const char *url, const char *key,
                                    int connect_s, int cmd_s, char *err,
                                    size_t errlen) {
  redisContext *c = connect_url(url, NULL, 0, connect_s, cmd_s, err, errlen);
  if (!c || !key || strncmp(url, "redis-cluster://", 16) != 0)
    return c;
  char host[256];
  int port = 0;
  if (cluster_master(c, key, host, sizeof host, &port, err, errlen) != 0) {
    redisFree(c);
    return NULL;
  }
  if (c->tcp.host && strcmp(c->tcp.host, host) == 0 && c->tcp.port == port)
    return c;
  redisFree(c);
  /* The same credentials, the master's address. */
  return connect_url(url, host, port, connect_s, cmd_s, err, errlen);
}

redisContext *dlc_redis_connect_node(const char *url, const char *host,
                                     int port, int connect_s, int cmd_s,
                                     char *err, size_t errlen) {
  return connect_url(url, host, port, connect_s, cmd_s, err, errlen);
}

redisContext *dlc_redis_connect(const char *url, int connect_s, int cmd_s,
                                char *err, size_t errlen) {
  return dlc_redis_connect_key(url, NULL, connect_s, cmd_s, err, errlen);
}

/* Connects to url (host:port instead of its address when host is set:
 * a cluster's master, with the URL's credentials), logs in. */
static redisContext *connect_url(const char *url, const char *host, int port,
                                 int connect_s, int cmd_s, char *err,
                                 size_t errlen) {
  dlc_url u;
  if (dlc_url_parse(url, &u, err, errlen) != 0)
    return NULL;
  if (host) {
    free(u.host);
    u.port = port;
    if (!(u.host = strdup(host))) {
      dlc_url_free(&u);
      return NULL;
    }
  } else if (u.sentinel) { /* the master the sentinels name now */
    dlock__url in;
    char master[256];
    int rc = dlock__url_parse(url, &in) == 0
                 ? sentinel_master(&in, connect_s, master, sizeof master,
                                   &u.port, err, errlen)
                 : -1;
    dlock__url_free(&in);
    if (rc != 0 || !(u.host = strdup(master))) {
      dlc_url_free(&u);
      return NULL;
    }
  }
  struct timeval tv = {connect_s, 0};
  redisContext *c = u.is_unix ? redisConnectUnixWithTimeout(u.path, tv)
                              : redisConnectWithTimeout(u.host, u.port, tv);
  if (!c || c->err) {
    snprintf(err, errlen, "%s", c ? c->errstr : "out of memory");
    if (c)
      redisFree(c);
    dlc_url_free(&u);
    return NULL;
  }
  struct timeval ct = {cmd_s, 0};
  redisSetTimeout(c, ct);
  int rc = login(c, &u, err, errlen);
  dlc_url_free(&u);
  if (rc != 0) {
    redisFree(c);
    return NULL;
  }
  return c;
}
