/* lockscan.c -- the lock space of a Redis deployment: every master scanned
 * at once, each on a thread of its own, through <dlock/admin.h> (see
 * lockscan.h). Who the holders and waiters are: lockwho.c. */
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "lockscan_int.h"

#define MAX_FIELDS 512 /* a hash with more fields is no lock: not read */

long long ls_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ls_exit_code(int rc, const char *why) {
  switch (rc) {
  case DLOCK_EAUTH:
  case DLOCK_ETLS:
    return 77;
  case DLOCK_ECONN:
    return 69;
  case DLOCK_EINVAL:
    return 64;
  default:
    return why && (strstr(why, "NOPERM") || strstr(why, "NOAUTH")) ? 77 : 70;
  }
}

/* ---- small helpers ----------------------------------------------------------
 */

int set_has(const strset *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->n; i++)
    if (strlen(s->v[i]) == n && memcmp(s->v[i], p, n) == 0)
      return 1;
  return 0;
}

int set_add(strset *s, const char *p, size_t n) {
  if (set_has(s, p, n))
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

void set_free(strset *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

void copy_n(char *dst, size_t cap, const char *p, size_t n) {
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, p, n);
  dst[n] = '\0';
}

void pipe_add(pipe *p, int argc, const char *const *argv) {
  if (p->oom || argc > LS_MAX_ARGS)
    return;
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    dlock_admin_cmd *c = realloc(p->cmd, cap * sizeof *c);
    if (c)
      p->cmd = c;
    char **a = realloc(p->args, cap * LS_MAX_ARGS * sizeof *a);
    if (a)
      p->args = a;
    if (!c || !a) {
      p->oom = 1;
      return;
    }
    p->cap = cap;
    for (size_t i = 0; i < p->n; i++) /* the arguments moved with args */
      p->cmd[i].argv = (const char *const *)&p->args[i * LS_MAX_ARGS];
  }
  char **a = &p->args[p->n * LS_MAX_ARGS];
  for (int i = 0; i < argc; i++)
    if (!(a[i] = strdup(argv[i])))
      p->oom = 1;
  p->cmd[p->n].argc = argc;
  p->cmd[p->n].argv = (const char *const *)a;
  p->cmd[p->n].argvlen = NULL;
  p->n++;
}

void pipe_reset(pipe *p) {
  for (size_t i = 0; i < p->n; i++)
    for (int j = 0; j < p->cmd[i].argc; j++)
      free(p->args[i * LS_MAX_ARGS + (size_t)j]);
  p->n = 0;
  p->oom = 0;
}

void pipe_free(pipe *p) {
  pipe_reset(p);
  free(p->cmd);
  free(p->args);
  memset(p, 0, sizeof *p);
}

long long r_int(const dlock_reply *r) {
  if (!r)
    return 0;
  if (r->type == DLOCK_REPLY_INTEGER)
    return r->integer;
  if (r->type == DLOCK_REPLY_STRING && r->str)
    return strtoll(r->str, NULL, 10);
  return 0;
}

const char *r_str(const dlock_reply *r) {
  return r && (r->type == DLOCK_REPLY_STRING || r->type == DLOCK_REPLY_STATUS)
             ? r->str
             : NULL;
}

size_t r_n(const dlock_reply *r) {
  return r && r->type == DLOCK_REPLY_ARRAY ? r->elements : 0;
}

void ls_replies_free(dlock_reply **rs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dlock_reply_free(rs[i]);
    rs[i] = NULL;
  }
}

int ls_fail(nscan *s, int code, const char *fmt, ...) {
  if (s->failed)
    return -1;
  s->failed = 1;
  s->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->why, sizeof s->why, fmt, ap);
  va_end(ap);
  return -1;
}

int ls_run(nscan *s, const pipe *p, dlock_reply **rs) {
  if (p->oom)
    return ls_fail(s, 70, "out of memory");
  long long t = s->o->call_ms > 0 ? s->o->call_ms : 2000;
  if (s->o->deadline_ms > 0) {
    long long left = s->t0 + s->o->deadline_ms - dlc_now_ms();
    if (left <= 0)
      return ls_fail(s, 69, "no reply within the scan's %lld ms",
                     s->o->deadline_ms);
    if (left < t)
      t = left;
  }
  int rc = dlock_admin_run(s->a, s->node, p->cmd, p->n, t, rs);
  s->commands += (long long)p->n;
  if (rc) {
    const char *e = dlock_last_error();
    size_t nl = strlen(s->node);
    /* the message names the master; the error line names it once */
    if (strncmp(e, s->node, nl) == 0 && e[nl] == ':' && e[nl + 1] == ' ')
      e += nl + 2;
    return ls_fail(s, ls_exit_code(rc, e), "%s", e);
  }
  for (size_t i = 0; i < p->n; i++) {
    const dlock_reply *r = rs[i];
    if (r->type != DLOCK_REPLY_ERROR)
      continue;
    if (strstr(r->str, "NOPERM") || strstr(r->str, "NOAUTH"))
      ls_fail(s, 77,
              "the ACL user may not read it (docs/operations.md has the "
              "rule): %s",
              r->str);
    else if (strncmp(r->str, "CLUSTERDOWN", 11) == 0)
      ls_fail(s, 69,
              "it refuses reads while the cluster is down (%s): a master "
              "failed and cluster-require-full-coverage is yes "
              "(cluster-allow-reads-when-down yes lets it answer)",
              r->str);
    else
      continue;
    ls_replies_free(rs, p->n);
    return -1;
  }
  return 0;
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

static int is_decimal(const dlock_reply *r) {
  const char *s = r_str(r);
  if (!s || r->type != DLOCK_REPLY_STRING || r->len == 0 || r->len > 19)
    return 0;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == r->len)
    return 0;
  for (; i < r->len; i++)
    if (s[i] < '0' || s[i] > '9')
      return 0;
  return 1;
}

/* "<36-char uuid>:<digits>" followed by nothing or ":write": the owner part
 * into *olen, 1 (read/plain), 2 (":write"), 0 (not an owner field). */
static int owner_field(const char *f, size_t n, size_t *olen) {
  if (n < LS_UUID_LEN + 2 || f[LS_UUID_LEN] != ':')
    return 0;
  for (size_t i = 0; i < LS_UUID_LEN; i++) {
    char ch = f[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
          (ch >= 'A' && ch <= 'F') || ch == '-'))
      return 0;
  }
  size_t i = LS_UUID_LEN + 1, d = 0;
  if (i < n && f[i] == '-') /* an async owner may be negative */
    i++;
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

static ls_lock *new_lock(nscan *s, const char *name, const char *kind) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 32;
    ls_lock *v = realloc(s->locks, cap * sizeof *v);
    if (!v)
      return NULL;
    s->locks = v;
    s->cap = cap;
  }
  ls_lock *l = &s->locks[s->n];
  memset(l, 0, sizeof *l);
  if (!(l->name = strdup(name)))
    return NULL;
  l->kind = kind;
  l->ttl_ms = -1;
  snprintf(l->node, sizeof l->node, "%s", s->node);
  s->n++;
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

static ls_waiter *add_waiter(ls_lock *l, const char *queue) {
  ls_waiter *v = realloc(l->waiters, (l->nwaiters + 1) * sizeof *v);
  if (!v)
    return NULL;
  l->waiters = v;
  ls_waiter *w = &v[l->nwaiters++];
  memset(w, 0, sizeof *w);
  w->queue = queue;
  return w;
}

/* ---- hashes: the mutex family and the rwlock
 * --------------------------------- */

#define HASH_READS 7 /* HGETALL, PTTL, 2 LRANGE, ZRANGE, EXISTS, HGETALL */

static void add_hash_reads(pipe *p, const char *name) {
  char q[1100], fq[1100], ft[1100], tk[1100], ws[1100];
  derived(q, sizeof q, "dlock_lock_queue", name, 1);
  derived(ws, sizeof ws, "dlock_lock_waits", name, 1);
  derived(fq, sizeof fq, "redisson_lock_queue", name, 0);
  derived(ft, sizeof ft, "redisson_lock_timeout", name, 0);
  derived(tk, sizeof tk, "redisson_lock_token", name, 0);
  const char *a1[] = {"HGETALL", name}, *a2[] = {"PTTL", name},
             *a3[] = {"LRANGE", q, "0", "255"},
             *a4[] = {"LRANGE", fq, "0", "255"},
             *a5[] = {"ZRANGE", ft, "0", "255", "WITHSCORES"},
             *a6[] = {"EXISTS", tk}, *a7[] = {"HGETALL", ws};
  pipe_add(p, 2, a1);
  pipe_add(p, 2, a2);
  pipe_add(p, 4, a3);
  pipe_add(p, 4, a4);
  pipe_add(p, 5, a5);
  pipe_add(p, 2, a6);
  pipe_add(p, 2, a7);
}

/* The value of field f in a flat [k, v, ...] reply, or NULL. */
static const char *hash_get(const dlock_reply *h, const char *f) {
  for (size_t i = 0; i + 1 < r_n(h); i += 2)
    if (r_str(h->element[i]) && strcmp(h->element[i]->str, f) == 0)
      return r_str(h->element[i + 1]);
  return NULL;
}

/* The hand-over queue "<uuid>:<tid>|<lease>|<wait id>" (q), its deadlines
 * and enqueue times (ws: <wid> -> server ms deadline, t<wid> -> queued at),
 * then the fair queue (fq) with deadlines (ft). 0 or -1 (OOM). */
static int take_waiters(ls_lock *l, const dlock_reply *q, const dlock_reply *ws,
                        const dlock_reply *fq, const dlock_reply *ft) {
  for (size_t i = 0; i < r_n(q); i++) {
    const char *e = r_str(q->element[i]);
    ls_waiter *w = e ? add_waiter(l, "handover") : NULL;
    if (e && !w)
      return -1;
    if (!e)
      continue;
    copy_n(w->owner, sizeof w->owner, e, strcspn(e, "|"));
    const char *id = strrchr(e, '|');
    const char *d = id ? hash_get(ws, id + 1) : NULL;
    w->deadline_ms = d ? strtoll(d, NULL, 10) : 0;
    char t[64];
    snprintf(t, sizeof t, "t%s", id ? id + 1 : "");
    const char *at = id ? hash_get(ws, t) : NULL;
    w->since_ms = at ? strtoll(at, NULL, 10) : 0;
  }
  for (size_t i = 0; i < r_n(fq); i++) {
    const char *e = r_str(fq->element[i]);
    ls_waiter *w = e ? add_waiter(l, "fair") : NULL;
    if (e && !w)
      return -1;
    if (!e)
      continue;
    copy_n(w->owner, sizeof w->owner, e, strlen(e));
    const char *d = hash_get(ft, e);
    w->deadline_ms = d ? (long long)strtod(d, NULL) : 0;
  }
  return 0;
}

/* Turns the HASH_READS replies r[] into a lock (or nothing): 0 or -1. */
static int take_hash(nscan *s, const char *name, dlock_reply **r) {
  const dlock_reply *h = r ? r[0] : NULL;
  if (r_n(h) == 0)
    return 0;
  int has_mode = 0, owners = 0;
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const char *f = r_str(h->element[i]);
    size_t ol;
    if (!f)
      return 0;
    if (strcmp(f, "mode") == 0)
      has_mode = 1;
    else if (owner_field(f, h->element[i]->len, &ol))
      owners++;
    else
      return 0; /* an application's hash */
  }
  if (!owners)
    return 0;
  int fair = r_n(r[3]) > 0 || r_n(r[4]) > 0;
  const char *kind = has_mode           ? "rwlock"
                     : fair             ? "fair"
                     : r_int(r[5]) == 1 ? "fenced"
                                        : "mutex";
  ls_lock *l = new_lock(s, name, kind);
  if (!l)
    return ls_fail(s, 70, "out of memory");
  l->ttl_ms = r_int(r[1]);
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const dlock_reply *f = h->element[i];
    size_t ol = 0;
    int t = owner_field(f->str, f->len, &ol);
    if (!t)
      continue;
    ls_holder *hd = add_holder(l);
    if (!hd)
      return ls_fail(s, 70, "out of memory");
    copy_n(hd->owner, sizeof hd->owner, f->str, ol);
    hd->count = r_int(h->element[i + 1]);
    hd->alive = -1;
    snprintf(hd->mode, sizeof hd->mode, "%s",
             !has_mode ? ""
             : t == 2  ? "write"
                       : "read");
  }
  if (take_waiters(l, r[2], r[6], r[3], r[4]) != 0)
    return ls_fail(s, 70, "out of memory");
  return 0;
}

/* ---- strings: semaphore, permits, latch, counter
 * ----------------------------- */

#define STR_READS 5 /* GETRANGE, PTTL, ZRANGE, PUBSUB NUMSUB, TYPE */

static void add_str_reads(pipe *p, const char *name) {
  char tq[1100], sc[1100], lc[1100];
  suffixed(tq, sizeof tq, name, "timeout");
  derived(sc, sizeof sc, "redisson_sc", name, 0);
  if (strchr(name, '{'))
    snprintf(lc, sizeof lc, "redisson_countdownlatch__channel__%s", name);
  else
    snprintf(lc, sizeof lc, "redisson_countdownlatch__channel__{%s}", name);
  /* the first 21 bytes only: an application's big string is never read */
  const char *a1[] = {"GETRANGE", name, "0", "20"}, *a2[] = {"PTTL", name},
             *a3[] = {"ZRANGE", tq, "0", "255", "WITHSCORES"},
             *a4[] = {"PUBSUB", "NUMSUB", sc, lc}, *a5[] = {"TYPE", tq};
  pipe_add(p, 4, a1);
  pipe_add(p, 2, a2);
  pipe_add(p, 5, a3);
  pipe_add(p, 4, a4);
  pipe_add(p, 2, a5);
}

/* evident: something besides the value says what the string is. */
static int take_str(nscan *s, const char *name, dlock_reply **r, int evident) {
  if (!r || !is_decimal(r[0]))
    return 0;
  const dlock_reply *z = r[2], *ns = r[3];
  long long sem_subs = 0, latch_subs = 0;
  if (r_n(ns) == 4) {
    sem_subs = r_int(ns->element[1]);
    latch_subs = r_int(ns->element[3]);
  }
  const char *zt = r_str(r[4]);
  int permits = zt && strcmp(zt, "zset") == 0;
  const char *kind = permits                   ? "permits"
                     : latch_subs > 0          ? "latch"
                     : sem_subs > 0 || evident ? "semaphore"
                     : s->o->all               ? "counter"
                                               : NULL;
  if (!kind)
    return 0;
  ls_lock *l = new_lock(s, name, kind);
  if (!l)
    return ls_fail(s, 70, "out of memory");
  l->value = r_int(r[0]);
  l->ttl_ms = r_int(r[1]);
  l->subscribers = latch_subs > 0 ? latch_subs : sem_subs;
  for (size_t i = 0; permits && i + 1 < r_n(z); i += 2) {
    const dlock_reply *id = z->element[i];
    ls_holder *h = add_holder(l);
    if (!h)
      return ls_fail(s, 70, "out of memory");
    snprintf(h->mode, sizeof h->mode, "permit");
    h->count = 1;
    h->alive = -1;
    size_t n = id->len < 16 ? id->len : 16;
    for (size_t k = 0; k < n; k++)
      snprintf(h->owner + 2 * k, 3, "%02x", (unsigned char)id->str[k]);
    long long exp = (long long)strtod(
        r_str(z->element[i + 1]) ? z->element[i + 1]->str : "0", NULL);
    h->expires_ms = exp >= 922337203685477LL ? -1 : exp;
  }
  return 0;
}

int ls_read_one(nscan *s, const char *name, char t, int evident) {
  pipe p = {0};
  if (t == 'h')
    add_hash_reads(&p, name);
  else
    add_str_reads(&p, name);
  dlock_reply *r[HASH_READS] = {0};
  int rc = ls_run(s, &p, r);
  if (rc == 0)
    rc = t == 'h' ? take_hash(s, name, r) : take_str(s, name, r, evident);
  ls_replies_free(r, p.n);
  pipe_free(&p);
  return rc;
}

/* ---- one batch of SCAN keys
 * -------------------------------------------------- */

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

static int matches(const nscan *s, const char *name) {
  return fnmatch(s->pattern, name, 0) == 0;
}

/* Notes what a key of the batch says: a client's info key (its id), a key
 * that points at a counting kind's name. 1 when it can be a lock's own key. */
static int note_key(nscan *s, const char *k) {
  char ev[1100];
  size_t kl = strlen(k);
  if (kl == 14 + LS_UUID_LEN + 1 && strncmp(k, "dlock_client:{", 14) == 0 &&
      k[kl - 1] == '}')
    (void)set_add(&s->clients, k + 14, LS_UUID_LEN);
  /* a Cluster client's copy on this master: dlock_client:{<tag>}:<id> */
  const char *close = strncmp(k, "dlock_client:{", 14) == 0 && kl < 100
                          ? strchr(k + 14, '}')
                          : NULL;
  if (close && close[1] == ':' && strlen(close + 2) == LS_UUID_LEN) {
    char e[160];
    int n = snprintf(e, sizeof e, "%s\t%s", close + 2, k);
    (void)set_add(&s->copies, e, (size_t)n);
  }
  if (evidence_of(k, ev, sizeof ev) && matches(s, ev))
    (void)set_add(&s->evidence, ev, strlen(ev));
  return strncmp(k, "redisson_", 9) != 0 && strncmp(k, "dlock_", 6) != 0 &&
         !strstr(k, ":rwlock_timeout:");
}

/* One command per name: TYPE (or HLEN) of each; the replies in r. */
static int per_name(nscan *s, const char *verb, const char **names, size_t n,
                    const char *only, dlock_reply **r) {
  pipe p = {0};
  for (size_t i = 0; i < n; i++)
    if (!only || only[i] == 'h') {
      const char *a[] = {verb, names[i]};
      pipe_add(&p, 2, a);
    }
  int rc = p.n ? ls_run(s, &p, r) : 0;
  pipe_free(&p);
  return rc;
}

/* The locks among names[0..n) (their kinds in t: 'h', 's', 0). */
static int read_details(nscan *s, const char **names, const char *t, size_t n) {
  pipe p = {0};
  for (size_t i = 0; i < n; i++)
    if (t[i] == 'h')
      add_hash_reads(&p, names[i]);
    else if (t[i] == 's')
      add_str_reads(&p, names[i]);
  dlock_reply **r = calloc(p.n + 1, sizeof(dlock_reply *));
  int rc = r ? (p.n ? ls_run(s, &p, r) : 0) : ls_fail(s, 70, "out of memory");
  size_t at = 0;
  for (size_t i = 0; r && rc == 0 && i < n; i++) {
    if (t[i] == 'h')
      rc = take_hash(s, names[i], r + at);
    else if (t[i] == 's')
      rc = take_str(s, names[i], r + at, 0);
    at += t[i] == 'h' ? HASH_READS : t[i] == 's' ? STR_READS : 0;
  }
  if (r)
    ls_replies_free(r, p.n);
  free(r);
  pipe_free(&p);
  return rc;
}

static int do_batch(nscan *s, const dlock_reply *keys) {
  size_t n = r_n(keys), nc = 0;
  const char **cand = calloc(n + 1, sizeof(const char *));
  char *t = calloc(n + 1, 1); /* 'h' hash, 's' string */
  dlock_reply **r = calloc(n + 1, sizeof(dlock_reply *));
  if (!cand || !t || !r) {
    free(cand);
    free(t);
    free(r);
    return ls_fail(s, 70, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const char *k = r_str(keys->element[i]);
    if (k && note_key(s, k))
      cand[nc++] = k;
  }
  /* A pattern names what it looks for: its strings are read too (a
   * permits object's, a semaphore's), not only those something points at
   * (their {N}:timeout or once key falls outside the pattern). */
  int narrow = strcmp(s->pattern, "*") != 0;
  int rc = per_name(s, "TYPE", cand, nc, NULL, r);
  for (size_t i = 0; rc == 0 && i < nc; i++) {
    const char *ty = r_str(r[i]);
    t[i] = (char)(!ty                                                  ? 0
                  : strcmp(ty, "hash") == 0                            ? 'h'
                  : strcmp(ty, "string") == 0 && (s->o->all || narrow) ? 's'
                                                                       : 0);
  }
  ls_replies_free(r, nc);
  /* the hashes' sizes: a big one is an application's, never read whole
   * (HGETALL of a million fields would stall Redis) */
  if (rc == 0 && (rc = per_name(s, "HLEN", cand, nc, t, r)) == 0) {
    size_t k = 0;
    for (size_t i = 0; i < nc; i++)
      if (t[i] == 'h' && r_int(r[k++]) > MAX_FIELDS)
        t[i] = 0;
    ls_replies_free(r, k);
  }
  if (rc == 0)
    rc = read_details(s, cand, t, nc);
  free(cand);
  free(t);
  free(r);
  return rc;
}

/* The semaphores and latches with waiters: their channels' names. */
static int channel_evidence(nscan *s) {
  static const char *pats[2] = {"redisson_sc:*",
                                "redisson_countdownlatch__channel__*"};
  pipe p = {0};
  for (int i = 0; i < 2; i++) {
    const char *a[] = {"PUBSUB", "CHANNELS", pats[i]};
    pipe_add(&p, 3, a);
  }
  dlock_reply *r[2] = {0};
  int rc = ls_run(s, &p, r);
  pipe_free(&p);
  for (int i = 0; rc == 0 && i < 2; i++)
    for (size_t j = 0; j < r_n(r[i]); j++) {
      const char *ch = r_str(r[i]->element[j]);
      if (!ch || strlen(ch) < (i == 0 ? 12u : 34u))
        continue;
      const char *nm = ch + (i == 0 ? 12 : 34);
      size_t nl = strlen(nm);
      char buf[1100];
      if (nl >= 2 && nm[0] == '{' && nm[nl - 1] == '}' &&
          !memchr(nm + 1, '{', nl - 2))
        copy_n(buf, sizeof buf, nm + 1, nl - 2);
      else
        copy_n(buf, sizeof buf, nm, nl);
      if (buf[0] && matches(s, buf))
        (void)set_add(&s->evidence, buf, strlen(buf));
    }
  ls_replies_free(r, 2);
  return rc;
}

/* Strings named by evidence: read them (unless listed already). */
static int evident_strings(nscan *s) {
  for (size_t i = 0; i < s->evidence.n; i++) {
    const char *nm = s->evidence.v[i];
    int seen = 0;
    for (size_t j = 0; j < s->n && !seen; j++)
      seen = strcmp(s->locks[j].name, nm) == 0;
    if (!seen && ls_read_one(s, nm, 's', 1) != 0)
      return -1;
  }
  return 0;
}

/* SCAN of s's master with MATCH pat, calling batch(s, keys) per call. */
static int scan_keys(nscan *s, const char *pat,
                     int (*batch)(nscan *, const dlock_reply *)) {
  char cursor[32] = "0", count[16];
  snprintf(count, sizeof count, "%d", s->o->count > 0 ? s->o->count : 1000);
  do {
    if ((s->o->max_keys > 0 && s->keys >= s->o->max_keys) ||
        (s->o->deadline_ms > 0 && dlc_now_ms() - s->t0 >= s->o->deadline_ms)) {
      s->truncated = 1;
      break;
    }
    const char *a[] = {"SCAN", cursor, "MATCH", pat, "COUNT", count};
    pipe p = {0};
    pipe_add(&p, 6, a);
    dlock_reply *r = NULL;
    int rc = ls_run(s, &p, &r);
    pipe_free(&p);
    if (rc)
      return -1;
    if (!r || r_n(r) != 2 || !r_str(r->element[0]) ||
        r->element[1]->type != DLOCK_REPLY_ARRAY) {
      ls_fail(s, 70, "SCAN: %s",
              r && r->type == DLOCK_REPLY_ERROR ? r->str : "unexpected reply");
      dlock_reply_free(r);
      return -1;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    s->keys += (long long)r->element[1]->elements;
    rc = batch(s, r->element[1]);
    dlock_reply_free(r);
    if (rc)
      return -1;
  } while (strcmp(cursor, "0") != 0);
  return 0;
}

static void *scan_thread(void *arg) {
  nscan *s = arg;
  if (channel_evidence(s) == 0 && scan_keys(s, s->pattern, do_batch) == 0)
    (void)evident_strings(s);
  return NULL;
}

/* SCAN MATCH dlock_client:* only notes the info keys. */
static int info_batch(nscan *s, const dlock_reply *keys) {
  for (size_t i = 0; i < r_n(keys); i++)
    if (r_str(keys->element[i]))
      (void)note_key(s, keys->element[i]->str);
  return 0;
}

void *ls_info_thread(void *arg) {
  nscan *s = arg;
  (void)scan_keys(s, "dlock_client:*", info_batch);
  s->keys = 0; /* not lock keys */
  return NULL;
}

/* ---- the scan
 * ---------------------------------------------------------------- */

void ls_add_error(ls_result *r, const char *node, int code, const char *why) {
  for (size_t i = 0; i < r->nerrors; i++)
    if (strcmp(r->errors[i].node, node) == 0)
      return;
  ls_nodeerr *v = realloc(r->errors, (r->nerrors + 1) * sizeof *v);
  if (!v)
    return;
  r->errors = v;
  ls_nodeerr *e = &v[r->nerrors++];
  snprintf(e->node, sizeof e->node, "%s", node);
  snprintf(e->why, sizeof e->why, "%s", why);
  e->code = code;
  for (size_t i = 0; i < r->nnodes; i++)
    if (strcmp(r->nodes[i], node) == 0)
      r->node_ok[i] = 0;
}

void ls_run_all(nscan *ss, const ls_result *r, void *(*fn)(void *)) {
  pthread_t *t = calloc(r->nnodes + 1, sizeof *t);
  char *started = calloc(r->nnodes + 1, 1);
  for (size_t i = 0; t && started && i < r->nnodes; i++)
    if (r->node_ok[i] && !ss[i].failed)
      started[i] = (char)(pthread_create(&t[i], NULL, fn, &ss[i]) == 0);
  for (size_t i = 0; t && started && i < r->nnodes; i++)
    if (started[i])
      pthread_join(t[i], NULL);
    else if (r->node_ok[i] && !ss[i].failed)
      fn(&ss[i]); /* no thread: on this one */
  free(t);
  free(started);
}

/* Moves the masters' locks into r; their failures to r->errors. */
int ls_merge(ls_result *r, nscan *ss, strset *seen, strset *copies) {
  for (size_t i = 0; i < r->nnodes; i++) {
    nscan *s = &ss[i];
    r->keys_scanned += s->keys;
    r->commands += s->commands;
    r->truncated |= s->truncated;
    s->keys = s->commands = 0;
    s->truncated = 0;
    if (s->failed)
      ls_add_error(r, s->node, s->code, s->why);
    for (size_t j = 0; j < s->clients.n; j++)
      (void)set_add(seen, s->clients.v[j], strlen(s->clients.v[j]));
    for (size_t j = 0; j < s->copies.n; j++) {
      const char *tab = strchr(s->copies.v[j], '\t');
      char e[700];
      int n = snprintf(e, sizeof e, "%.*s\t%s%s", (int)(tab - s->copies.v[j]),
                       s->copies.v[j], s->node, tab);
      (void)set_add(copies, e, (size_t)n);
    }
    set_free(&s->copies);
    if (s->n) {
      ls_lock *v = realloc(r->locks, (r->n + s->n) * sizeof *v);
      if (!v)
        return -1;
      r->locks = v;
      memcpy(r->locks + r->n, s->locks, s->n * sizeof *v);
      r->n += s->n;
    }
    free(s->locks);
    s->locks = NULL;
    s->n = s->cap = 0;
    set_free(&s->evidence);
    set_free(&s->clients);
  }
  return 0;
}

static int by_name(const void *a, const void *b) {
  const ls_lock *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : strcmp(x->node, y->node);
}

int ls_list_nodes(dlock_admin *a, ls_result *r, char *err, size_t el) {
  int rc = dlock_admin_nodes(a, &r->nodes, &r->nnodes);
  if (rc) {
    snprintf(err, el, "%s", dlock_last_error());
    return ls_exit_code(rc, err);
  }
  r->node_ok = calloc(r->nnodes + 1, sizeof *r->node_ok);
  if (!r->node_ok) {
    snprintf(err, el, "out of memory");
    return 70;
  }
  for (size_t i = 0; i < r->nnodes; i++)
    r->node_ok[i] = 1;
  return 0;
}

int ls_scan(dlock_admin *a, const ls_opts *o, ls_result *out, char *err,
            size_t errlen) {
  memset(out, 0, sizeof *out);
  long long t0 = dlc_now_ms();
  int ex = ls_list_nodes(a, out, err, errlen);
  if (ex)
    return ex;
  nscan *ss = calloc(out->nnodes + 1, sizeof *ss);
  if (!ss) {
    snprintf(err, errlen, "out of memory");
    return 70;
  }
  const char *pat = o->pattern && *o->pattern ? o->pattern : "*";
  for (size_t i = 0; i < out->nnodes; i++)
    ss[i] = (nscan){
        .a = a, .o = o, .pattern = pat, .node = out->nodes[i], .t0 = t0};
  ls_run_all(ss, out, scan_thread);
  strset seen = {0}, copies = {0};
  int rc = ls_merge(out, ss, &seen, &copies);
  /* A pattern hid the clients' info keys: read them only when a lock was
   * found whose waiters or permits only they can name. */
  if (rc == 0 && out->n && strcmp(pat, "*") != 0) {
    ls_run_all(ss, out, ls_info_thread);
    rc = ls_merge(out, ss, &seen, &copies);
  }
  free(ss);
  if (rc) {
    set_free(&seen);
    set_free(&copies);
    snprintf(err, errlen, "out of memory");
    return 70;
  }
  if (out->n > 1)
    qsort(out->locks, out->n, sizeof *out->locks, by_name);
  ls_name_all(a, o, t0, out, &seen, &copies);
  set_free(&seen);
  set_free(&copies);
  out->elapsed_ms = dlc_now_ms() - t0;
  return 0;
}

void ls_lock_free(ls_lock *l) {
  free(l->name);
  free(l->holders);
  free(l->waiters);
  memset(l, 0, sizeof *l);
}

void ls_free(ls_result *r) {
  for (size_t i = 0; i < r->n; i++)
    ls_lock_free(&r->locks[i]);
  free(r->locks);
  dlock_admin_nodes_free(r->nodes, r->nnodes);
  free(r->node_ok);
  free(r->errors);
  memset(r, 0, sizeof *r);
}

const ls_lock *ls_find(const ls_result *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->locks[i].name, name) == 0)
      return &r->locks[i];
  return NULL;
}
