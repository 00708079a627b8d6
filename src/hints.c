/*
 * hints.c -- a wrong URL told in the user's terms: a redis:// URL (or an
 * admin call) at a Redis Sentinel's port.
 *
 * A Sentinel accepts the connection, the login and PING, then refuses every
 * data command as unknown ("ERR unknown command 'EVALSHA'"), which says
 * nothing about the mistake. On that refusal the server is asked SENTINEL
 * MASTERS once; a Sentinel's answer (the masters it monitors) replaces the
 * message with "this is a Sentinel: use redis-sentinel://host:port/<master>",
 * as a redis:// URL at a TLS port already says "use rediss://" (link.c) and
 * one at a Cluster node "use a redis-cluster:// URL" (conn.c). Anything else
 * (a proxy without EVAL, an old server) keeps its own message.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The names of SENTINEL MASTERS's reply (an array of flat field/value
 * arrays) into buf, comma-separated; 1 if it is such a reply. */
static int master_names(const redisReply *r, char *buf, size_t len) {
  buf[0] = '\0';
  if (!r || r->type != REDIS_REPLY_ARRAY)
    return 0;
  size_t at = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *m = r->element[i];
    for (size_t j = 0; m->type == REDIS_REPLY_ARRAY && j + 1 < m->elements;
         j += 2)
      if (m->element[j]->type == REDIS_REPLY_STRING &&
          strcmp(m->element[j]->str, "name") == 0 &&
          m->element[j + 1]->type == REDIS_REPLY_STRING && at < len) {
        int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
                         m->element[j + 1]->str);
        at += w > 0 ? (size_t)w : 0;
      }
  }
  return 1;
}

/* The message for a Sentinel at `where` that refused `refused`. */
static int sentinel_message(const char *where, const char *refused,
                            const redisReply *r) {
  char names[256];
  master_names(r, names, sizeof names);
  const char *first = names;
  size_t fl = strcspn(names, ",");
  return dlock__fail(
      DLOCK_EREDIS,
      "the server at %s is a Redis Sentinel, not a data node "
      "(it answered '%.120s'): this is a Sentinel: use "
      "redis-sentinel://%s/%.*s%s%s%s",
      where, refused, where, fl ? (int)fl : 11, fl ? first : "MASTER-NAME",
      names[0] ? " (it monitors: " : "", names, names[0] ? ")" : "");
}

int dlock__sentinel_port_hint(dlock__link *l, const char *where,
                              int64_t deadline) {
  int64_t left = deadline - dlock__now_ms();
  int ms = left > 100 ? (left > INT32_MAX ? INT32_MAX : (int)left) : 100;
  dlock__link_set_timeout(l, ms, ms);
  const char *argv[2] = {"SENTINEL", "MASTERS"};
  size_t lens[2] = {8, 7};
  redisReply *r = dlock__link_cmd(l, 2, argv, lens);
  int rc = 0;
  if (r && r->type == REDIS_REPLY_ARRAY)
    rc = sentinel_message(where, "ERR unknown command", r);
  if (r)
    freeReplyObject(r);
  return rc;
}

int dlock__explain_sentinel_port(dlock_client *c, int rc) {
  const char *e = dlock_last_error();
  if (rc != DLOCK_EREDIS || c->url.sentinel || c->cl ||
      !strstr(e, "unknown command"))
    return rc;
  char refused[200];
  snprintf(refused, sizeof refused, "%s", e);
  char *args = strstr(refused, ", with args"); /* the sha, the keys */
  if (args)
    *args = '\0';
  const char *argv[2] = {"SENTINEL", "MASTERS"};
  size_t lens[2] = {8, 7};
  dlock__cmd cmd = {NULL, NULL, 2, argv, lens, 1};
  redisReply *r = NULL;
  dlock__err_keep_begin();
  int q = dlock__exec(c, &cmd, &r);
  dlock__err_keep_end();
  if (q == 0 && r && r->type == REDIS_REPLY_ARRAY) {
    char where[300];
    if (c->url.is_unix)
      snprintf(where, sizeof where, "unix:%s", c->url.path);
    else
      snprintf(where, sizeof where, "%s:%d", c->url.host, c->url.port);
    rc = sentinel_message(where, refused, r);
  }
  if (r)
    freeReplyObject(r);
  return rc;
}
