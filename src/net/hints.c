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
 *
 * Also the message of a WRONGTYPE refusal of a script
 * (dlock__explain_wrongtype): which object, which key, what it holds (the
 * server is asked the TYPE of each key; the message's parts,
 * dlock__wrongtype_key and dlock__wrongtype_fail, serve both clients).
 */
#include <stdio.h>
#include <string.h>

#include "net/net.h"
#include "client/client.h"

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

/* What a script's object is called in messages (from the script's name). */
static const char *object_noun(const dlock__script *s) {
  static const struct {
    const char *prefix, *noun;
  } t[] = {{"fair_", "fair lock"},     {"fenced_", "fenced lock"},
           {"rw_", "read-write lock"}, {"sem_", "semaphore"},
           {"latch_", "latch"},        {"redlock_", "Redlock lock"}};
  for (size_t i = 0; s && s->name && i < sizeof t / sizeof t[0]; i++)
    if (strncmp(s->name, t[i].prefix, strlen(t[i].prefix)) == 0)
      return t[i].noun;
  return "lock";
}

/* "a string value", "a hash", ... for a TYPE reply. */
static const char *type_phrase(const char *t) {
  static const char *const map[][2] = {
      {"string", "a string value"}, {"hash", "a hash"},
      {"list", "a list"},           {"set", "a set"},
      {"zset", "a sorted set"},     {"stream", "a stream"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(t, map[i][0]) == 0)
      return map[i][1];
  return t;
}

/* The TYPE of key k into buf ("" when unknown, e.g. not allowed). */
static void key_type(dlock_client *c, const char *k, size_t kl, char *buf,
                     size_t len) {
  const char *argv[2] = {"TYPE", k};
  size_t lens[2] = {4, kl};
  dlock__cmd cmd = {k, NULL, 2, argv, lens, 0};
  redisReply *r = NULL;
  buf[0] = '\0';
  if (dlock__exec(c, &cmd, &r) == 0 && r &&
      (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING))
    snprintf(buf, len, "%s", r->str);
  if (r)
    freeReplyObject(r);
}

void dlock__wrongtype_key(char *msg, size_t cap, size_t *n, const char *k,
                          size_t kl, const char *type) {
  if (!type[0] || strcmp(type, "none") == 0 || *n >= cap)
    return;
  int w = snprintf(msg + *n, cap - *n, "%s'%.*s' holds %s",
                   *n ? ", key " : "the key ", (int)kl, k, type_phrase(type));
  *n += w > 0 ? (size_t)w : 0;
  if (*n >= cap)
    *n = cap - 1;
}

int dlock__wrongtype_fail(const dlock__script *s, const char *k0, size_t k0l,
                          const char *held) {
  const char *noun = object_noun(s);
  return dlock__fail(DLOCK_EREDIS,
                     "%s, which %s '%.*s' cannot use: %s (Redis: WRONGTYPE); "
                     "dlock leaves it as it is: delete or rename it, or use "
                     "another name",
                     held && held[0] ? held : "a key", noun, (int)k0l, k0,
                     strstr(noun, "lock") ? "not a lock" : "the wrong type");
}

int dlock__explain_wrongtype(dlock_client *c, const dlock__script *s, int rc,
                             int nkeys, const char **keys,
                             const size_t *klens) {
  if (rc == DLOCK_EREDIS && !dlock__err_kept() &&
      strstr(dlock_last_error(), "unknown command"))
    return dlock__explain_sentinel_port(c, rc); /* hints.c */
  if (rc != DLOCK_EREDIS || dlock__err_kept() || nkeys < 1 ||
      strncmp(dlock_last_error(), "WRONGTYPE", 9) != 0)
    return rc;
  char msg[DLOCK__ERRBUF_SIZE];
  size_t n = 0;
  msg[0] = '\0';
  for (int i = 0; i < nkeys; i++) {
    size_t kl = klens ? klens[i] : strlen(keys[i]);
    char t[32];
    key_type(c, keys[i], kl, t, sizeof t);
    dlock__wrongtype_key(msg, sizeof msg, &n, keys[i], kl, t);
  }
  return dlock__wrongtype_fail(s, keys[0], klens ? klens[0] : strlen(keys[0]),
                               msg);
}
