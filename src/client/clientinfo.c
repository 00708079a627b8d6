/*
 * clientinfo.c -- the client's info key: who a client is (host name, pid,
 * program, start time), so that "dlock status" can name the machine and
 * process behind a holder field "<client id>:<thread>". The lock's own keys
 * are untouched (Redisson's layout); the info key is a separate hash,
 * "dlock_client:{<client id>}", with the watchdog timeout as TTL, written by
 * the errand thread (errand.c) from the client's first hold or wait on (not
 * a failed trylock, nor an acquisition undone for DLOCK_ENOSYNC) and
 * refreshed one renewal period after each write ends, so it expires with
 * the client. It never delays a renewal: the renewal thread does renewals
 * and loss reports only (issue 38.6), and the write goes without the sync
 * WAIT on the errand thread's own connection.
 *
 * HOLD START TIMES. The key also lists, for each hold of the client, when
 * it began: field "since:<tid>:<name>" -> wall ms, recorded by the thread
 * that took the lock (dlock__hold_note; no Redis traffic) and published by
 * the next write, which a hold's start brings forward to "now" (at most
 * one write per DLOCK__INFO_GAP_MS under churn). The lock call sends
 * nothing more: its round trips are unchanged. Each write replaces the
 * whole key, so holds that ended drop out.
 *
 * CONNECTION NAMES. dlock__conn_name gives the CLIENT SETNAME every link
 * sends in its handshake (link.c, async_conn.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"

static dlock__script g_write = {
    "client_info",
    /* KEYS[1] info key. ARGV[1] ttl ms, [2] host, [3] pid, [4] program,
     * [5] started, then pairs since:<tid>:<name>, wall ms of the hold's
     * start. The key is written whole: holds that ended are gone. */
    "redis.call('del', KEYS[1])\n"
    "redis.call('hset', KEYS[1], 'host', ARGV[2], 'pid', ARGV[3], "
    "'program', ARGV[4], 'started', ARGV[5])\n"
    "for i = 6, #ARGV - 1, 2 do\n"
    "  redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1])\n"
    "end\n"
    "redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "return 1\n",
    ""};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_scripts(void) { dlock__script_init(&g_write); }

const dlock__script *dlock__info_script(void) {
  pthread_once(&g_once, init_scripts);
  return &g_write;
}

/* "dlock_client:{<id>}" for a client id (the first 36 characters). */
static void info_key(dlock__sb *b, const char *id) {
  dlock__sb_adds(b, "dlock_client:{");
  dlock__sb_add(b, id, DLOCK__UUID_LEN);
  dlock__sb_add(b, "}", 1);
}

void dlock__info_want(dlock_client *c) {
  if (c->er.info_at != 0)
    return;
  c->er.info_at = dlock__now_ms();
  dlock__errand_wake(c);
}

void dlock__info_since_later(dlock_client *c) {
  if (c->er.since_check != 0)
    return; /* that look finds this hold too, or sets the next one */
  c->er.since_check = dlock__now_ms() + DLOCK__SINCE_AFTER_MS;
  dlock__errand_wake(c);
}

void dlock__info_soon(dlock_client *c) {
  c->er.info_dirty = 1;
  if (c->er.info_running)
    return; /* info_tick (errand.c) schedules the next one */
  int64_t now = dlock__now_ms();
  int64_t at = c->er.info_end ? c->er.info_end + DLOCK__INFO_GAP_MS : now;
  if (at < now)
    at = now;
  if (c->er.info_at == 0 || at < c->er.info_at) {
    c->er.info_at = at;
    dlock__errand_wake(c);
  }
}

int dlock__info_write_via(dlock_client *c, dlock__info_send_fn *send,
                          void *arg) {
  pthread_once(&g_once, init_scripts);
  char host[256] = "", pid[24], ttl[24], started[24];
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "?");
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  snprintf(ttl, sizeof ttl, "%d", c->cfg.watchdog_timeout_ms);
  snprintf(started, sizeof started, "%lld", (long long)c->started_ms);
  const char *prog = program_invocation_short_name;
  dlock__sb k, hb;
  dlock__sb_init(&k);
  dlock__sb_init(&hb);
  info_key(&k, c->id);
  int nh = dlock__holds_since(c, &hb);
  nh += dlock__info_extra(c, &hb); /* waits, permits, kinds: clientnotes.c */
  /* ARGV: ttl, host, pid, program, started, then field/value pairs: the
   * connection name (dlock status shows it), the hold starts. 4 more slots
   * for EVAL, the body, numkeys and the key (a send of its own). */
  int npairs = nh + (c->conn_name != NULL);
  const char **all =
      hb.oom ? NULL : dlock__calloc(9 + 2 * (size_t)npairs, sizeof *all);
  const char **args = all ? all + 4 : NULL;
  if (k.oom || !args) {
    free(all);
    dlock__sb_free(&k);
    dlock__sb_free(&hb);
    return DLOCK_ENOMEM;
  }
  args[0] = ttl;
  args[1] = host;
  args[2] = pid;
  args[3] = prog ? prog : "?";
  args[4] = started;
  int na = 5;
  if (c->conn_name) {
    args[na++] = "conn_name";
    args[na++] = c->conn_name;
  }
  const char *p = hb.p;
  for (int i = 0; i < 2 * nh; i++) {
    args[na++] = p;
    p += strlen(p) + 1;
  }
  int rc;
  dlock__err_keep_begin(); /* a background write: no one's message */
  /* EVAL itself (no script cache to miss), without WAIT (bookkeeping,
   * nothing a replica must confirm), on the sender's connection. */
  char nk[2] = "1";
  all[0] = "EVAL";
  all[1] = g_write.body;
  all[2] = nk;
  all[3] = k.p;
  size_t *lens = dlock__calloc(4 + (size_t)na, sizeof *lens);
  if (!lens) {
    rc = DLOCK_ENOMEM;
  } else {
    for (int i = 0; i < 4 + na; i++)
      lens[i] = i == 3 ? k.len : strlen(all[i]);
    rc = send(c, arg, k.p, 4 + na, all, lens);
    dlock__info_copies(c, send, arg, 4 + na, all, lens); /* clientnotes.c */
    free(lens);
  }
  dlock__err_keep_end();
  free(all);
  dlock__sb_free(&k);
  dlock__sb_free(&hb);
  return rc;
}

int dlock__conn_name(const char *configured, char **out) {
  *out = NULL;
  if (configured && !*configured)
    return 0; /* "": no name */
  char buf[600];
  if (configured) {
    snprintf(buf, sizeof buf, "%s", configured);
  } else {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
      snprintf(host, sizeof host, "?");
    const char *prog = program_invocation_short_name;
    snprintf(buf, sizeof buf, "dlock:%.200s:%.200s:%ld",
             prog && *prog ? prog : "?", host, (long)getpid());
  }
  /* CLIENT SETNAME refuses a name with a byte outside '!'..'~'. */
  for (char *p = buf; *p; p++)
    if (*p < '!' || *p > '~')
      *p = '_';
  if (!(*out = dlock__strdup(buf)))
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  return 0;
}

/* Copies a reply string into buf (truncated, NUL-terminated). */
static void copy_str(char *buf, size_t len, const redisReply *v) {
  size_t n = v->len < len - 1 ? v->len : len - 1;
  memcpy(buf, v->str, n);
  buf[n] = '\0';
}

/* Fills *info from an HGETALL reply; 1 if it had fields, else 0. */
static int take_fields(const redisReply *r, dlock_client_info *info) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
    return 0;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    const redisReply *k = r->element[i], *v = r->element[i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
      continue;
    if (strcmp(k->str, "host") == 0)
      copy_str(info->host, sizeof info->host, v);
    else if (strcmp(k->str, "program") == 0)
      copy_str(info->program, sizeof info->program, v);
    else if (strcmp(k->str, "pid") == 0)
      info->pid = strtoll(v->str, NULL, 10);
    else if (strcmp(k->str, "started") == 0)
      info->started_ms = strtoll(v->str, NULL, 10);
  }
  return 1;
}

int dlock_client_info_query(dlock_client *c, const char *owner,
                            dlock_client_info *info) {
  dlock__clear_error();
  if (info)
    memset(info, 0, sizeof *info);
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!owner || !info || strlen(owner) < DLOCK__UUID_LEN)
    return dlock__fail(DLOCK_EINVAL,
                       "owner must start with a 36-character client id");
  if (c->store)
    return c->store->client_info(c, owner, info);
  dlock__sb k;
  dlock__sb_init(&k);
  info_key(&k, owner);
  if (k.oom) {
    dlock__sb_free(&k);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  const char *argv[2] = {"HGETALL", k.p};
  size_t lens[2] = {7, k.len};
  dlock__cmd cmd = {k.p, NULL, 2, argv, lens, 0};
  redisReply *r = NULL;
  rc = dlock__exec(c, &cmd, &r);
  if (rc == 0 && r)
    rc = take_fields(r, info);
  if (r)
    freeReplyObject(r);
  dlock__sb_free(&k);
  return rc;
}

int dlock_client_conn_name_query(dlock_client *c, const char *owner, char *buf,
                                 size_t len) {
  dlock__clear_error();
  if (buf && len)
    buf[0] = '\0';
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!owner || !buf || !len || strlen(owner) < DLOCK__UUID_LEN)
    return dlock__fail(DLOCK_EINVAL,
                       "owner must start with a 36-character client id, buf "
                       "must not be NULL or empty");
  if (c->etcd) /* etcd clients name no connections */
    return 0;
  dlock__sb k;
  dlock__sb_init(&k);
  info_key(&k, owner);
  if (k.oom) {
    dlock__sb_free(&k);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  const char *argv[3] = {"HGET", k.p, "conn_name"};
  size_t lens[3] = {4, k.len, 9};
  dlock__cmd cmd = {k.p, NULL, 3, argv, lens, 0};
  redisReply *r = NULL;
  rc = dlock__exec(c, &cmd, &r);
  if (rc == 0 && r && r->type == REDIS_REPLY_STRING) {
    copy_str(buf, len, r);
    rc = 1;
  }
  if (r)
    freeReplyObject(r);
  dlock__sb_free(&k);
  return rc;
}

int dlock_hold_since_query(dlock_client *c, const char *owner, const char *name,
                           long long *since_ms) {
  dlock__clear_error();
  if (since_ms)
    *since_ms = 0;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!owner || !name || !*name || !since_ms ||
      strlen(owner) < DLOCK__UUID_LEN + 2 || owner[DLOCK__UUID_LEN] != ':')
    return dlock__fail(DLOCK_EINVAL, "owner must be \"<client id>:<thread "
                                     "id>\" and name a lock name");
  if (c->etcd) /* not published on etcd (docs/etcd.md) */
    return 0;
  const char *tid = owner + DLOCK__UUID_LEN + 1;
  size_t tl = strspn(tid, "0123456789");
  if (tl == 0 || (tid[tl] && tid[tl] != ':'))
    return dlock__fail(DLOCK_EINVAL, "owner '%.80s' has no thread id", owner);
  dlock__sb k, f;
  dlock__sb_init(&k);
  dlock__sb_init(&f);
  info_key(&k, owner);
  dlock__sb_adds(&f, "since:");
  dlock__sb_add(&f, tid, tl);
  dlock__sb_add(&f, ":", 1);
  dlock__sb_adds(&f, name);
  if (k.oom || f.oom) {
    dlock__sb_free(&k);
    dlock__sb_free(&f);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  const char *argv[3] = {"HGET", k.p, f.p};
  size_t lens[3] = {4, k.len, f.len};
  dlock__cmd cmd = {k.p, NULL, 3, argv, lens, 0};
  redisReply *r = NULL;
  rc = dlock__exec(c, &cmd, &r);
  if (rc == 0 && r && r->type == REDIS_REPLY_STRING) {
    *since_ms = strtoll(r->str, NULL, 10);
    rc = 1;
  }
  if (r)
    freeReplyObject(r);
  dlock__sb_free(&k);
  dlock__sb_free(&f);
  return rc;
}
