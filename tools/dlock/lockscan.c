/* lockscan.c -- the lock space of a Redis deployment (see lockscan.h). */
#include <fnmatch.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "lockscan.h"
#include "url.h"

#define UUID_LEN 36
#define MAX_FIELDS 512 /* a hash with more fields is no lock: not read */
#define MAX_LIST 256   /* queue entries, permits read per lock */

typedef struct node {
  redisContext *c;
  char addr[64];
} node;

typedef struct range {
  int lo, hi;
  size_t node;
} range;

typedef struct strset {
  char **v;
  size_t n, cap;
} strset;

typedef struct scan {
  const ls_opts *o;
  const char *pattern;
  node *nodes;
  size_t nnodes;
  range *ranges;
  size_t nranges;
  ls_result *out;
  size_t cap;
  strset evidence; /* per node: names a once key, permits set or channel
                      points at */
  char *err;
  size_t errlen;
  long long t0;
  int code; /* exit code of a failure: 69, 70, 77 */
} scan;

long long ls_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- small helpers ----------------------------------------------------- */

static int set_add(strset *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->n; i++)
    if (strlen(s->v[i]) == n && memcmp(s->v[i], p, n) == 0)
      return 0;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    char **v = realloc(s->v, cap * sizeof *v);
    if (!v)
      return -1;
    s->v = v;
    s->cap = cap;
  }
  if (!(s->v[s->n] = strndup(p, n)))
    return -1;
  s->n++;
  return 0;
}

static void set_free(strset *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* Redisson's prefixName: "prefix:{name}", or "prefix:name" when the name
 * holds a '{'. ext: dlock's extension keys, "prefix::name" then. */
static void derived(char *buf, size_t n, const char *prefix, const char *name,
                    int ext) {
  if (strchr(name, '{'))
    snprintf(buf, n, "%s:%s%s", prefix, ext ? ":" : "", name);
  else
    snprintf(buf, n, "%s:{%s}", prefix, name);
}

/* Redisson's suffixName: "{name}:suffix", or "name:suffix". */
static void suffixed(char *buf, size_t n, const char *name,
                     const char *suffix) {
  if (strchr(name, '{'))
    snprintf(buf, n, "%s:%s", name, suffix);
  else
    snprintf(buf, n, "{%s}:%s", name, suffix);
}

static unsigned crc16(const char *p, size_t n) {
  unsigned crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (unsigned)(unsigned char)p[i] << 8;
    for (int j = 0; j < 8; j++)
      crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
    crc &= 0xffff;
  }
  return crc;
}

static int key_slot(const char *k) {
  size_t n = strlen(k);
  const char *o = strchr(k, '{');
  if (o) {
    const char *c = strchr(o + 1, '}');
    if (c && c > o + 1)
      return (int)(crc16(o + 1, (size_t)(c - o - 1)) & 16383);
  }
  return (int)(crc16(k, n) & 16383);
}

static node *node_for(scan *s, const char *key) {
  if (s->nranges == 0)
    return &s->nodes[0];
  int slot = key_slot(key);
  for (size_t i = 0; i < s->nranges; i++)
    if (s->ranges[i].lo <= slot && slot <= s->ranges[i].hi)
      return &s->nodes[s->ranges[i].node];
  return &s->nodes[0];
}

static int fail(scan *s, const char *fmt, const char *a, const char *b) {
  snprintf(s->err, s->errlen, fmt, a, b);
  return -1;
}

/* Appends a command (argv of C strings); counted. */
static void qsend(scan *s, node *nd, int argc, const char **argv) {
  redisAppendCommandArgv(nd->c, argc, argv, NULL);
  s->out->commands++;
}

/* The next reply of nd's pipeline, or NULL after writing why. */
static redisReply *reply(scan *s, node *nd) {
  void *r = NULL;
  if (redisGetReply(nd->c, &r) != REDIS_OK || !r) {
    fail(s, "%s: %s", nd->addr, nd->c->errstr[0] ? nd->c->errstr : "no reply");
    return NULL;
  }
  return r;
}

static long long rint_of(const redisReply *r) {
  if (!r)
    return 0;
  if (r->type == REDIS_REPLY_INTEGER)
    return r->integer;
  if (r->type == REDIS_REPLY_STRING)
    return strtoll(r->str, NULL, 10);
  return 0;
}

static int is_decimal(const redisReply *r) {
  if (!r || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 19)
    return 0;
  size_t i = r->str[0] == '-' ? 1 : 0;
  if (i == r->len)
    return 0;
  for (; i < r->len; i++)
    if (r->str[i] < '0' || r->str[i] > '9')
      return 0;
  return 1;
}

/* "<36-char uuid>:<digits>" followed by nothing or ":write": the owner part
 * into *olen, 1 (read/plain), 2 (":write"), 0 (not an owner field). */
static int owner_field(const char *f, size_t n, size_t *olen) {
  if (n < UUID_LEN + 2 || f[UUID_LEN] != ':')
    return 0;
  for (size_t i = 0; i < UUID_LEN; i++) {
    char ch = f[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
          (ch >= 'A' && ch <= 'F') || ch == '-'))
      return 0;
  }
  size_t i = UUID_LEN + 1, d = 0;
  while (i < n && f[i] >= '0' && f[i] <= '9')
    i++, d++;
  if (d == 0)
    return 0;
  *olen = i;
  if (i == n)
    return 1;
  if (n - i == 6 && memcmp(f + i, ":write", 6) == 0)
    return 2;
  return 0;
}

static ls_lock *new_lock(scan *s, const char *name, const char *kind,
                         node *nd) {
  ls_result *r = s->out;
  if (r->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 32;
    ls_lock *v = realloc(r->locks, cap * sizeof *v);
    if (!v)
      return NULL;
    r->locks = v;
    s->cap = cap;
  }
  ls_lock *l = &r->locks[r->n];
  memset(l, 0, sizeof *l);
  if (!(l->name = strdup(name)))
    return NULL;
  l->kind = kind;
  l->ttl_ms = -1;
  snprintf(l->node, sizeof l->node, "%s", nd->addr);
  r->n++;
  return l;
}

static ls_holder *add_holder(ls_lock *l) {
  ls_holder *v = realloc(l->holders, (l->nholders + 1) * sizeof *v);
  if (!v)
    return NULL;
  l->holders = v;
  ls_holder *h = &v[l->nholders++];
  memset(h, 0, sizeof *h);
  h->expires_ms = -1;
  return h;
}

static ls_waiter *add_waiter(ls_lock *l) {
  ls_waiter *v = realloc(l->waiters, (l->nwaiters + 1) * sizeof *v);
  if (!v)
    return NULL;
  l->waiters = v;
  ls_waiter *w = &v[l->nwaiters++];
  memset(w, 0, sizeof *w);
  return w;
}

static void copy_n(char *dst, size_t cap, const char *p, size_t n) {
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, p, n);
  dst[n] = '\0';
}

/* ---- hashes: the mutex family and the rwlock ----------------------------- */

#define HASH_READS 7 /* HGETALL, PTTL, 2 LRANGE, ZRANGE, EXISTS, HGETALL */

static void send_hash_reads(scan *s, node *nd, const char *name) {
  char q[1024], fq[1024], ft[1024], tk[1024], ws[1024];
  derived(q, sizeof q, "dlock_lock_queue", name, 1);
  derived(ws, sizeof ws, "dlock_lock_waits", name, 1);
  derived(fq, sizeof fq, "redisson_lock_queue", name, 0);
  derived(ft, sizeof ft, "redisson_lock_timeout", name, 0);
  derived(tk, sizeof tk, "redisson_lock_token", name, 0);
  const char *a1[] = {"HGETALL", name};
  const char *a2[] = {"PTTL", name};
  const char *a3[] = {"LRANGE", q, "0", "255"};
  const char *a4[] = {"LRANGE", fq, "0", "255"};
  const char *a5[] = {"ZRANGE", ft, "0", "255", "WITHSCORES"};
  const char *a6[] = {"EXISTS", tk};
  const char *a7[] = {"HGETALL", ws};
  qsend(s, nd, 2, a1);
  qsend(s, nd, 2, a2);
  qsend(s, nd, 4, a3);
  qsend(s, nd, 4, a4);
  qsend(s, nd, 5, a5);
  qsend(s, nd, 2, a6);
  qsend(s, nd, 2, a7);
}

static const char *waits_deadline(const redisReply *ws, const char *id) {
  for (size_t i = 0;
       ws && ws->type == REDIS_REPLY_ARRAY && i + 1 < ws->elements; i += 2)
    if (ws->element[i]->type == REDIS_REPLY_STRING &&
        strcmp(ws->element[i]->str, id) == 0 &&
        ws->element[i + 1]->type == REDIS_REPLY_STRING)
      return ws->element[i + 1]->str;
  return NULL;
}

/* Turns the HASH_READS replies r[] into a lock (or nothing). */
static int take_hash(scan *s, node *nd, const char *name, redisReply **r) {
  const redisReply *h = r[0];
  if (!h || h->type != REDIS_REPLY_ARRAY || h->elements == 0)
    return 0;
  int has_mode = 0, owners = 0;
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const redisReply *f = h->element[i];
    size_t ol;
    if (f->type != REDIS_REPLY_STRING)
      return 0;
    if (strcmp(f->str, "mode") == 0)
      has_mode = 1;
    else if (owner_field(f->str, f->len, &ol))
      owners++;
    else
      return 0; /* an application's hash */
  }
  if (!owners)
    return 0;
  const redisReply *fq = r[3], *ft = r[4];
  int fair = (fq && fq->type == REDIS_REPLY_ARRAY && fq->elements > 0) ||
             (ft && ft->type == REDIS_REPLY_ARRAY && ft->elements > 0);
  const char *kind = has_mode             ? "rwlock"
                     : fair               ? "fair"
                     : rint_of(r[5]) == 1 ? "fenced"
                                          : "mutex";
  ls_lock *l = new_lock(s, name, kind, nd);
  if (!l)
    return -1;
  l->ttl_ms = rint_of(r[1]);
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const redisReply *f = h->element[i];
    size_t ol = 0;
    int t = owner_field(f->str, f->len, &ol);
    if (!t)
      continue;
    ls_holder *hd = add_holder(l);
    if (!hd)
      return -1;
    copy_n(hd->owner, sizeof hd->owner, f->str, ol);
    hd->count = rint_of(h->element[i + 1]);
    snprintf(hd->mode, sizeof hd->mode, "%s",
             !has_mode ? ""
             : t == 2  ? "write"
                       : "read");
  }
  /* the mutex hand-over queue: "<uuid>:<tid>|<lease>|<wait id>" */
  const redisReply *q = r[2];
  for (size_t i = 0; q && q->type == REDIS_REPLY_ARRAY && i < q->elements;
       i++) {
    const redisReply *e = q->element[i];
    if (e->type != REDIS_REPLY_STRING)
      continue;
    ls_waiter *w = add_waiter(l);
    if (!w)
      return -1;
    w->queue = "handover";
    copy_n(w->owner, sizeof w->owner, e->str, strcspn(e->str, "|"));
    const char *id = strrchr(e->str, '|');
    const char *d = id ? waits_deadline(r[6], id + 1) : NULL;
    w->deadline_ms = d ? strtoll(d, NULL, 10) : 0;
  }
  /* the fair queue, deadlines in redisson_lock_timeout */
  for (size_t i = 0; fq && fq->type == REDIS_REPLY_ARRAY && i < fq->elements;
       i++) {
    const redisReply *e = fq->element[i];
    if (e->type != REDIS_REPLY_STRING)
      continue;
    ls_waiter *w = add_waiter(l);
    if (!w)
      return -1;
    w->queue = "fair";
    copy_n(w->owner, sizeof w->owner, e->str, e->len);
    for (size_t j = 0;
         ft && ft->type == REDIS_REPLY_ARRAY && j + 1 < ft->elements; j += 2)
      if (ft->element[j]->type == REDIS_REPLY_STRING &&
          strcmp(ft->element[j]->str, e->str) == 0)
        w->deadline_ms = (long long)strtod(ft->element[j + 1]->str, NULL);
  }
  return 0;
}

/* ---- strings: semaphore, permits, latch, counter ----------------------- */

#define STR_READS 5 /* GETRANGE, PTTL, ZRANGE, PUBSUB NUMSUB, TYPE */

static void send_str_reads(scan *s, node *nd, const char *name) {
  char tq[1024], sc[1024], lc[1024];
  suffixed(tq, sizeof tq, name, "timeout");
  derived(sc, sizeof sc, "redisson_sc", name, 0);
  if (strchr(name, '{'))
    snprintf(lc, sizeof lc, "redisson_countdownlatch__channel__%s", name);
  else
    snprintf(lc, sizeof lc, "redisson_countdownlatch__channel__{%s}", name);
  /* the first 21 bytes only: an application's big string is never read */
  const char *a1[] = {"GETRANGE", name, "0", "20"};
  const char *a2[] = {"PTTL", name};
  const char *a3[] = {"ZRANGE", tq, "0", "255", "WITHSCORES"};
  const char *a4[] = {"PUBSUB", "NUMSUB", sc, lc};
  const char *a5[] = {"TYPE", tq};
  qsend(s, nd, 4, a1);
  qsend(s, nd, 2, a2);
  qsend(s, nd, 5, a3);
  qsend(s, nd, 4, a4);
  qsend(s, nd, 2, a5);
}

/* evident: something besides the value says what the string is. */
static int take_str(scan *s, node *nd, const char *name, redisReply **r,
                    int evident) {
  if (!is_decimal(r[0]))
    return 0;
  const redisReply *z = r[2], *ns = r[3];
  long long sem_subs = 0, latch_subs = 0;
  if (ns && ns->type == REDIS_REPLY_ARRAY && ns->elements == 4) {
    sem_subs = rint_of(ns->element[1]);
    latch_subs = rint_of(ns->element[3]);
  }
  int permits = r[4] && r[4]->type == REDIS_REPLY_STATUS &&
                strcmp(r[4]->str, "zset") == 0;
  const char *kind = permits                   ? "permits"
                     : latch_subs > 0          ? "latch"
                     : sem_subs > 0 || evident ? "semaphore"
                     : s->o->all               ? "counter"
                                               : NULL;
  if (!kind)
    return 0;
  ls_lock *l = new_lock(s, name, kind, nd);
  if (!l)
    return -1;
  l->value = rint_of(r[0]);
  l->ttl_ms = rint_of(r[1]);
  l->subscribers = latch_subs > 0 ? latch_subs : sem_subs;
  for (size_t i = 0;
       permits && z && z->type == REDIS_REPLY_ARRAY && i + 1 < z->elements;
       i += 2) {
    const redisReply *id = z->element[i];
    ls_holder *h = add_holder(l);
    if (!h)
      return -1;
    snprintf(h->mode, sizeof h->mode, "permit");
    h->count = 1;
    h->alive = -1; /* permits name no client */
    size_t n = id->len < 16 ? id->len : 16;
    for (size_t k = 0; k < n; k++)
      snprintf(h->owner + 2 * k, 3, "%02x", (unsigned char)id->str[k]);
    long long exp = (long long)strtod(z->element[i + 1]->str, NULL);
    h->expires_ms = exp >= 922337203685477LL ? -1 : exp;
  }
  return 0;
}

/* ---- one batch of SCAN keys -----------------------------------------------
 */

/* The lock a derived key points at (dlock_once:{N}:hex, {N}:timeout), into
 * buf; 0 if none. */
static int evidence_of(const char *k, char *buf, size_t n) {
  size_t kl = strlen(k);
  if (strncmp(k, "dlock_once:", 11) == 0) {
    const char *p = k + 11, *end = strrchr(k, ':');
    if (!end || end <= p)
      return 0;
    if (*p == ':') /* a name with braces */
      copy_n(buf, n, p + 1, (size_t)(end - p - 1));
    else if (*p == '{' && end[-1] == '}')
      copy_n(buf, n, p + 1, (size_t)(end - p - 2));
    else
      return 0;
    return buf[0] != '\0';
  }
  if (kl > 8 && strcmp(k + kl - 8, ":timeout") == 0 &&
      !strstr(k, ":rwlock_timeout:")) {
    if (k[0] == '{' && k[kl - 9] == '}' && !memchr(k + 1, '{', kl - 10))
      copy_n(buf, n, k + 1, kl - 10);
    else if (strchr(k, '{'))
      copy_n(buf, n, k, kl - 8);
    else
      return 0;
    return buf[0] != '\0';
  }
  return 0;
}

static int matches(scan *s, const char *name) {
  return fnmatch(s->pattern, name, 0) == 0;
}

static int do_batch(scan *s, node *nd, const redisReply *keys) {
  size_t n = keys->elements;
  const char **cand = calloc(n ? n : 1, sizeof *cand);
  if (!cand)
    return fail(s, "%s%s", "out of memory", "");
  size_t nc = 0;
  char ev[1024];
  for (size_t i = 0; i < n; i++) {
    const char *k = keys->element[i]->str;
    if (!k)
      continue;
    if (evidence_of(k, ev, sizeof ev) && matches(s, ev) &&
        set_add(&s->evidence, ev, strlen(ev)) != 0) {
      free(cand);
      return fail(s, "%s%s", "out of memory", "");
    }
    if (strncmp(k, "redisson_", 9) == 0 || strncmp(k, "dlock_", 6) == 0 ||
        strstr(k, ":rwlock_timeout:"))
      continue;
    cand[nc++] = k;
  }
  int rc = 0;
  for (size_t i = 0; i < nc; i++) {
    const char *a[] = {"TYPE", cand[i]};
    qsend(s, nd, 2, a);
  }
  char *kind = calloc(nc ? nc : 1, 1); /* 'h' hash, 's' string */
  for (size_t i = 0; i < nc && rc == 0; i++) {
    redisReply *t = reply(s, nd);
    if (!t) {
      rc = -1;
      break;
    }
    if (kind && t->type == REDIS_REPLY_STATUS)
      kind[i] = (char)(strcmp(t->str, "hash") == 0     ? 'h'
                       : strcmp(t->str, "string") == 0 ? 's'
                                                       : 0);
    freeReplyObject(t);
  }
  if (!kind && rc == 0)
    rc = fail(s, "%s%s", "out of memory", "");
  /* the hashes' sizes: a big one is an application's, never read whole
   * (HGETALL of a million fields would stall Redis) */
  for (size_t i = 0; rc == 0 && i < nc; i++)
    if (kind[i] == 'h') {
      const char *a[] = {"HLEN", cand[i]};
      qsend(s, nd, 2, a);
    }
  for (size_t i = 0; rc == 0 && i < nc; i++) {
    if (kind[i] != 'h')
      continue;
    redisReply *t = reply(s, nd);
    if (!t) {
      rc = -1;
      break;
    }
    if (rint_of(t) > MAX_FIELDS)
      kind[i] = 0;
    freeReplyObject(t);
  }
  /* details, one pipelined round for the batch */
  for (size_t i = 0; rc == 0 && i < nc; i++) {
    if (kind[i] == 'h')
      send_hash_reads(s, nd, cand[i]);
    else if (kind[i] == 's' && s->o->all)
      send_str_reads(s, nd, cand[i]);
  }
  for (size_t i = 0; rc == 0 && i < nc; i++) {
    int m = kind[i] == 'h'                ? HASH_READS
            : kind[i] == 's' && s->o->all ? STR_READS
                                          : 0;
    if (!m)
      continue;
    redisReply *r[HASH_READS] = {0};
    for (int j = 0; j < m && rc == 0; j++)
      if (!(r[j] = reply(s, nd)))
        rc = -1;
    if (rc == 0)
      rc = kind[i] == 'h' ? take_hash(s, nd, cand[i], r)
                          : take_str(s, nd, cand[i], r, 0);
    for (int j = 0; j < m; j++)
      if (r[j])
        freeReplyObject(r[j]);
  }
  free(kind);
  free(cand);
  return rc;
}

/* The semaphores and latches with waiters: their channels' names. */
static int channel_evidence(scan *s, node *nd) {
  static const char *pats[2] = {"redisson_sc:*",
                                "redisson_countdownlatch__channel__*"};
  for (int p = 0; p < 2; p++) {
    const char *a[] = {"PUBSUB", "CHANNELS", pats[p]};
    qsend(s, nd, 3, a);
    redisReply *r = reply(s, nd);
    if (!r)
      return -1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
      const char *ch = r->element[i]->str;
      const char *nm = ch + (p == 0 ? 12 : 34);
      size_t nl = strlen(nm);
      char buf[1024];
      if (nl >= 2 && nm[0] == '{' && nm[nl - 1] == '}' &&
          !memchr(nm + 1, '{', nl - 2))
        copy_n(buf, sizeof buf, nm + 1, nl - 2);
      else
        copy_n(buf, sizeof buf, nm, nl);
      if (buf[0] && matches(s, buf) &&
          set_add(&s->evidence, buf, strlen(buf)) != 0) {
        freeReplyObject(r);
        return fail(s, "%s%s", "out of memory", "");
      }
    }
    freeReplyObject(r);
  }
  return 0;
}

/* Strings named by evidence: read them (unless listed already). */
static int evident_strings(scan *s, node *nd, size_t first_lock) {
  for (size_t i = 0; i < s->evidence.n; i++) {
    const char *nm = s->evidence.v[i];
    int seen = 0;
    for (size_t j = first_lock; j < s->out->n && !seen; j++)
      seen = strcmp(s->out->locks[j].name, nm) == 0;
    if (seen) {
      s->evidence.v[i][0] = '\0'; /* done */
      continue;
    }
    send_str_reads(s, nd, nm);
  }
  int rc = 0;
  for (size_t i = 0; i < s->evidence.n && rc == 0; i++) {
    if (!s->evidence.v[i][0])
      continue;
    redisReply *r[STR_READS] = {0};
    for (int j = 0; j < STR_READS && rc == 0; j++)
      if (!(r[j] = reply(s, nd)))
        rc = -1;
    if (rc == 0)
      rc = take_str(s, nd, s->evidence.v[i], r, 1);
    for (int j = 0; j < STR_READS; j++)
      if (r[j])
        freeReplyObject(r[j]);
  }
  return rc;
}

static int scan_node(scan *s, node *nd) {
  char cursor[32] = "0";
  char count[16];
  snprintf(count, sizeof count, "%d", s->o->count > 0 ? s->o->count : 1000);
  size_t first_lock = s->out->n;
  set_free(&s->evidence);
  if (channel_evidence(s, nd) != 0)
    return -1;
  do {
    if ((s->o->max_keys > 0 && s->out->keys_scanned >= s->o->max_keys) ||
        (s->o->deadline_ms > 0 && dlc_now_ms() - s->t0 >= s->o->deadline_ms)) {
      s->out->truncated = 1;
      break;
    }
    const char *a[] = {"SCAN", cursor, "MATCH", s->pattern, "COUNT", count};
    qsend(s, nd, 6, a);
    redisReply *r = reply(s, nd);
    if (!r)
      return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      fail(s, "%s: SCAN: %s", nd->addr,
           r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
      freeReplyObject(r);
      return -1;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    s->out->keys_scanned += (long long)r->element[1]->elements;
    int rc = do_batch(s, nd, r->element[1]);
    freeReplyObject(r);
    if (rc != 0)
      return -1;
  } while (strcmp(cursor, "0") != 0);
  return evident_strings(s, nd, first_lock);
}

/* ---- holders' client info ---------------------------------------------- */

static int resolve_holders(scan *s) {
  /* one HGETALL per distinct client, on the node of its slot */
  strset ids = {0};
  for (size_t i = 0; i < s->out->n; i++)
    for (size_t j = 0; j < s->out->locks[i].nholders; j++) {
      const ls_holder *h = &s->out->locks[i].holders[j];
      if (h->alive != -1 && strlen(h->owner) > UUID_LEN &&
          set_add(&ids, h->owner, UUID_LEN) != 0) {
        set_free(&ids);
        return fail(s, "%s%s", "out of memory", "");
      }
    }
  for (size_t i = 0; i < s->out->n; i++)
    for (size_t j = 0; j < s->out->locks[i].nwaiters; j++) {
      const ls_waiter *w = &s->out->locks[i].waiters[j];
      if (strlen(w->owner) > UUID_LEN &&
          set_add(&ids, w->owner, UUID_LEN) != 0) {
        set_free(&ids);
        return fail(s, "%s%s", "out of memory", "");
      }
    }
  // NOLINTNEXTLINE(bugprone-sizeof-expression): *info is a pointer, as meant
  redisReply **info = calloc(ids.n ? ids.n : 1, sizeof *info);
  int rc = info ? 0 : -1;
  /* send every node's share, then read in the same order per node */
  for (size_t i = 0; rc == 0 && i < ids.n; i++) {
    char k[64];
    snprintf(k, sizeof k, "dlock_client:{%s}", ids.v[i]);
    const char *a[] = {"HGETALL", k};
    qsend(s, node_for(s, k), 2, a);
  }
  for (size_t i = 0; rc == 0 && i < ids.n; i++) {
    char k[64];
    snprintf(k, sizeof k, "dlock_client:{%s}", ids.v[i]);
    if (!(info[i] = reply(s, node_for(s, k))))
      rc = -1;
  }
  for (size_t i = 0; rc == 0 && i < s->out->n; i++) {
    ls_lock *l = &s->out->locks[i];
    for (size_t j = 0; j < l->nholders; j++) {
      ls_holder *h = &l->holders[j];
      if (h->alive == -1)
        continue;
      const redisReply *r = NULL;
      for (size_t k = 0; k < ids.n; k++)
        if (strncmp(ids.v[k], h->owner, UUID_LEN) == 0)
          r = info[k];
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        continue;
      h->alive = 1;
      char since[1200];
      snprintf(since, sizeof since, "since:%s:%s", h->owner + UUID_LEN + 1,
               l->name);
      for (size_t f = 0; f + 1 < r->elements; f += 2) {
        const redisReply *fk = r->element[f], *fv = r->element[f + 1];
        if (fk->type != REDIS_REPLY_STRING || fv->type != REDIS_REPLY_STRING)
          continue;
        if (strcmp(fk->str, "host") == 0)
          copy_n(h->host, sizeof h->host, fv->str, fv->len);
        else if (strcmp(fk->str, "program") == 0)
          copy_n(h->program, sizeof h->program, fv->str, fv->len);
        else if (strcmp(fk->str, "pid") == 0)
          h->pid = strtoll(fv->str, NULL, 10);
        else if (strcmp(fk->str, since) == 0)
          h->since_ms = strtoll(fv->str, NULL, 10);
      }
    }
  }
  for (size_t i = 0; rc == 0 && i < s->out->n; i++) {
    ls_lock *l = &s->out->locks[i];
    for (size_t j = 0; j < l->nwaiters; j++) {
      ls_waiter *w = &l->waiters[j];
      const redisReply *r = NULL;
      for (size_t k = 0; k < ids.n; k++)
        if (strncmp(ids.v[k], w->owner, UUID_LEN) == 0)
          r = info[k];
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        continue;
      w->alive = 1;
      for (size_t f = 0; f + 1 < r->elements; f += 2) {
        const redisReply *fk = r->element[f], *fv = r->element[f + 1];
        if (fk->type != REDIS_REPLY_STRING || fv->type != REDIS_REPLY_STRING)
          continue;
        if (strcmp(fk->str, "host") == 0)
          copy_n(w->host, sizeof w->host, fv->str, fv->len);
        else if (strcmp(fk->str, "program") == 0)
          copy_n(w->program, sizeof w->program, fv->str, fv->len);
        else if (strcmp(fk->str, "pid") == 0)
          w->pid = strtoll(fv->str, NULL, 10);
      }
    }
  }
  for (size_t i = 0; info && i < ids.n; i++)
    if (info[i])
      freeReplyObject(info[i]);
  free(info);
  set_free(&ids);
  if (!info)
    return fail(s, "%s%s", "out of memory", "");
  return rc;
}

/* ---- nodes ----------------------------------------------------------------
 */

/* A connection failed (err says why): 77 for a refused login, else 69. */
static int conn_failed(scan *s) {
  s->code = strstr(s->err, "AUTH") || strstr(s->err, "WRONGPASS") ||
                    strstr(s->err, "NOPERM") || strstr(s->err, "NOAUTH")
                ? 77
                : 69;
  return -1;
}

static int connect_nodes(scan *s) {
  const ls_opts *o = s->o;
  int to = o->timeout_s > 0 ? o->timeout_s : 5;
  if (strncmp(o->url, "rediss", 6) == 0 && (s->code = 64))
    return fail(s, "%s%s",
                "TLS URLs (rediss://) are not supported by list, top and "
                "exporter yet",
                "");
  redisContext *c = dlc_redis_connect(o->url, to, to, s->err, s->errlen);
  if (!c)
    return conn_failed(s);
  s->nodes = calloc(1, sizeof *s->nodes);
  if (!s->nodes) {
    redisFree(c);
    return fail(s, "%s%s", "out of memory", "");
  }
  s->nodes[0].c = c;
  s->nnodes = 1;
  if (c->connection_type == REDIS_CONN_TCP)
    snprintf(s->nodes[0].addr, sizeof s->nodes[0].addr, "%s:%d", c->tcp.host,
             c->tcp.port);
  else
    snprintf(s->nodes[0].addr, sizeof s->nodes[0].addr, "%s",
             c->unix_sock.path);
  if (strncmp(o->url, "redis-cluster://", 16) != 0)
    return 0;
  redisReply *r = redisCommand(c, "CLUSTER SLOTS");
  s->out->commands++;
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    fail(s, "CLUSTER SLOTS: %s%s",
         r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply", "");
    if (r)
      freeReplyObject(r);
    return -1;
  }
  s->ranges = calloc(r->elements ? r->elements : 1, sizeof *s->ranges);
  node *nv = realloc(s->nodes, (r->elements + 1) * sizeof *nv);
  if (nv) /* the old block is gone: keep the new one for ls_scan to free */
    s->nodes = nv;
  if (!s->ranges || !nv) {
    freeReplyObject(r);
    return fail(s, "%s%s", "out of memory", "");
  }
  int rc = 0;
  for (size_t i = 0; i < r->elements && rc == 0; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
      continue;
    char addr[64];
    snprintf(addr, sizeof addr, "%s:%lld", e->element[2]->element[0]->str,
             e->element[2]->element[1]->integer);
    size_t k = 0;
    while (k < s->nnodes && strcmp(s->nodes[k].addr, addr) != 0)
      k++;
    if (k == s->nnodes) {
      memset(&s->nodes[k], 0, sizeof s->nodes[k]);
      snprintf(s->nodes[k].addr, sizeof s->nodes[k].addr, "%s", addr);
      s->nodes[k].c = dlc_redis_connect_node(
          o->url, e->element[2]->element[0]->str,
          (int)e->element[2]->element[1]->integer, to, to, s->err, s->errlen);
      s->nnodes++;
      if (!s->nodes[k].c)
        rc = conn_failed(s);
    }
    s->ranges[s->nranges].lo = (int)e->element[0]->integer;
    s->ranges[s->nranges].hi = (int)e->element[1]->integer;
    s->ranges[s->nranges].node = k;
    s->nranges++;
  }
  freeReplyObject(r);
  /* the seed is scanned only if it is a master with slots */
  int seed_used = 0;
  for (size_t i = 0; i < s->nranges; i++)
    seed_used |= s->ranges[i].node == 0;
  if (rc == 0 && !seed_used && s->nnodes > 1) {
    redisFree(s->nodes[0].c);
    memmove(&s->nodes[0], &s->nodes[1], (s->nnodes - 1) * sizeof *s->nodes);
    s->nnodes--;
    for (size_t i = 0; i < s->nranges; i++)
      s->ranges[i].node--;
  }
  return rc;
}

static int by_name(const void *a, const void *b) {
  const ls_lock *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : strcmp(x->node, y->node);
}

int ls_scan(const ls_opts *o, ls_result *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  scan s;
  memset(&s, 0, sizeof s);
  s.o = o;
  s.pattern = o->pattern && *o->pattern ? o->pattern : "*";
  s.out = out;
  s.err = err;
  s.errlen = errlen;
  s.t0 = dlc_now_ms();
  s.code = 70;
  int rc = connect_nodes(&s);
  for (size_t i = 0; rc == 0 && i < s.nnodes; i++)
    rc = scan_node(&s, &s.nodes[i]);
  if (rc == 0)
    rc = resolve_holders(&s);
  out->nodes = s.nnodes;
  for (size_t i = 0; i < s.nnodes; i++)
    if (s.nodes[i].c)
      redisFree(s.nodes[i].c);
  free(s.nodes);
  free(s.ranges);
  set_free(&s.evidence);
  if (rc != 0) {
    ls_free(out);
    return s.code;
  }
  if (out->n > 1)
    qsort(out->locks, out->n, sizeof *out->locks, by_name);
  out->elapsed_ms = dlc_now_ms() - s.t0;
  return 0;
}

void ls_free(ls_result *r) {
  for (size_t i = 0; i < r->n; i++) {
    free(r->locks[i].name);
    free(r->locks[i].holders);
    free(r->locks[i].waiters);
  }
  free(r->locks);
  memset(r, 0, sizeof *r);
}

const ls_lock *ls_find(const ls_result *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->locks[i].name, name) == 0)
      return &r->locks[i];
  return NULL;
}
