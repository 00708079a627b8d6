/*
 * watchdog.c -- lease renewal for every hold taken without an explicit
 * lease, and lost-lock reporting.
 *
 * HOW IT WORKS. Holds renewed by the watchdog sit in one list per client.
 * The watchdog thread sleeps until the oldest of them is one renewal period
 * (watchdog_timeout_ms / 3) old, then renews every hold that is at least half
 * a period old -- so holds taken at nearby times share a batch. A batch is
 * one pipeline on the watchdog's own connection: EVALSHA of the renew script
 * with up to WD_CHUNK keys each, all written before the first reply is read,
 * so a whole batch costs one round trip however many locks it covers. Each
 * script answers with one string of '1'/'0' flags (not an array of integers:
 * one reply object per chunk instead of one per lock).
 *
 * The renew script checks ownership per key and never creates a key: a key
 * that is gone (expired, deleted, force-unlocked, taken) comes back 0, the
 * hold is marked lost, leaves the list, and cfg.on_lock_lost runs on this
 * thread. The holder's next unlock returns DLOCK_ELOST.
 *
 * ON A CLUSTER a batch goes to each slot's master as the slot map says.
 * A chunk answered with MOVED, ASK or TRYAGAIN (its slot moved, or is
 * being migrated and some of its keys are on the importing node already)
 * is renewed again key by key through the router, which follows MOVED and
 * ASK as for every other command: a hold stays renewed however long a
 * migration of its slot lasts.
 *
 * WHAT IF Redis does not answer? The batch is retried every
 * min(1 s, period / 4) -- well before the lease can run out. Meanwhile every
 * hold keeps a LOCAL DEADLINE: the send time of its last confirmed renewal +
 * lease - (lease/100 + 2 ms). The key's TTL on the server started after that
 * send, so it cannot expire before the deadline; once the deadline passes,
 * it may have. A second thread per client, the expiry thread, sleeps until
 * the earliest deadline and declares the holds past it lost at that moment
 * -- not when a renewal stuck in a dead network gives up, which can be a
 * command timeout later, after another client took the lock (issue 9.1).
 *
 * TELLING FAILURES AS THEY HAPPEN (issue 27). Every renewal that gets no
 * answer is logged (renew_failed, with the lease left) and counted; and
 * the expiry thread, which looks at the holds at least every quarter
 * period, logs a renewal still unconfirmed half a period past its due time
 * whatever holds the watchdog thread. Losses are counted by reason and
 * logged (lost) before on_lock_lost runs; no hook is called with reg.mu
 * held. A renewal answered NOSCRIPT (a fresh server, SCRIPT FLUSH) is no
 * failure: its chunk is sent again at once as EVAL on the same connection
 * (which caches the script for the next batch).
 *
 * THE RENEWAL PATH DOES RENEWALS AND LOSS REPORTS ONLY (issue 38.6). This
 * thread sends nothing else: the client's info key, the declines of grants
 * that reached no wait and the cluster map refreshes it needs are the
 * errand thread's (errand.c), on connections of its own -- a master that
 * swallows the info key's write, or a decline waiting for replicas, never
 * holds a renewal of a lock on another, healthy master. And every wait of
 * this thread on the network is bounded far below the renewal period
 * (dlock__wd_wait_bound: half a period, at most command_timeout_ms and
 * connect_timeout_ms): the connect of its own connections, the
 * plain-or-TLS probe after a connection closed during its handshake, the
 * TLS and Redis handshakes, a batch's replies (the I/O guard, link.c),
 * the router's retries of a renewal sent through it (the call's deadline),
 * and it never waits for another thread's cluster map refresh. Each wait
 * also ends when the client is freed.
 *
 * RACES WITH UNLOCK. Holds are never freed while a batch may point at them
 * (a hold freed meanwhile waits in the client's graveyard until the batch
 * ends), and each hold carries a generation bumped on every release, so a
 * reply about an older generation is ignored. A hold whose final unlock is in
 * flight is marked `releasing`: a renewal that finds its key gone then says
 * nothing (the unlock deleted it; the unlock's own reply decides), so no loss
 * is reported for a lock that was unlocked -- but only while that release
 * can still have run in time (dlock__release_may_have_run: first sent
 * before the local deadline). A final unlock that ended without a reply
 * stays in that state until the caller's retry: its key found gone, or its
 * deadline passed, just ends the renewals, silently. A partial unlock
 * (count 2 -> 1) is never `releasing`: the thread still holds the lock, and
 * its loss is reported like any other (issue 25.8).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/client.h"

/* Keys per EVALSHA: big enough that the per-command cost on both sides is
 * small, small enough that one script keeps Redis busy only ~0.2 ms. */
#define WD_CHUNK 256

void dlock__wd_add(dlock_client *c, dlock__hold *h) {
  if (h->in_wd)
    return;
  h->wd_prev = NULL;
  h->wd_next = c->wd.head;
  if (c->wd.head)
    c->wd.head->wd_prev = h;
  c->wd.head = h;
  h->in_wd = 1;
  h->retry_at = 0;
  c->wd.count++;
  /* The expiry thread sleeps until the earliest local deadline it knows;
   * wake it only if this one is earlier (rare: an old send time). */
  if (c->wd.exp_started && h->valid_until < c->wd.exp_wake_at)
    pthread_cond_signal(&c->wd.exp_cv);
  /* No wake-up: a new hold is due one period from now, and the watchdog
   * never sleeps longer than one period (see wd_main), so it will be on
   * time. Waking it on every 0 -> 1 hold cost two context switches per
   * uncontended lock/unlock pair. */
}

void dlock__wd_remove(dlock_client *c, dlock__hold *h) {
  if (!h->in_wd)
    return;
  if (h->wd_prev)
    h->wd_prev->wd_next = h->wd_next;
  else
    c->wd.head = h->wd_next;
  if (h->wd_next)
    h->wd_next->wd_prev = h->wd_prev;
  h->wd_prev = h->wd_next = NULL;
  h->in_wd = 0;
  c->wd.count--;
}

void dlock__wd_quiesce(dlock_client *c) {
  while (c->wd.busy)
    pthread_cond_wait(&c->reg.cv, &c->reg.mu);
}

typedef struct wd_item {
  dlock__hold *h;
  const dlock__mutex_ops *ops; /* set when the hold has a custom renewal */
  uint64_t tid;
  int count;
  uint32_t gen;
  const char *name;
  size_t name_len;
  const char *suffix; /* field suffix, e.g. ":write" */
  dlock__node *node;  /* the master serving it (cluster), else &c->node */
  unsigned slot;      /* its key's slot (cluster), else 0 */
} wd_item;

typedef struct wd_state {
  dlock__bglinks links; /* one per node renewals went to (bglink.c) */
  wd_item *items;
  char *flags; /* one per item: 1 renewed, 0 gone, 2 unknown, 3 redirected
                * (renew_batch renews it through the router), 4 NOSCRIPT
                * (renew_node sends its chunk again as EVAL) */
  size_t cap;
} wd_state;

/* The hash field of it into buf ("<uuid>:<tid>" + the kind's suffix). */
static size_t item_field(dlock_client *c, const wd_item *it, char *buf) {
  size_t fl = dlock__field(c, it->tid, buf);
  size_t sl = strlen(it->suffix);
  if (fl + sl >= DLOCK__FIELD_MAX)
    sl = DLOCK__FIELD_MAX - 1 - fl;
  memcpy(buf + fl, it->suffix, sl);
  buf[fl + sl] = '\0';
  return fl + sl;
}

/* Writes one EVALSHA (with eval: EVAL and the body) of the renew script
 * for items[0..k). 0 or -1. */
static int send_chunk(dlock_client *c, dlock__link *l, const wd_item *items,
                      size_t k, const char *lease, size_t ll, int eval) {
  const dlock__script *s = dlock__core_script(DLOCK__S_RENEW);
  const char *argv[3 + 2 * WD_CHUNK + 1];
  size_t lens[3 + 2 * WD_CHUNK + 1];
  static _Thread_local char fields[WD_CHUNK][DLOCK__FIELD_MAX];
  char nk[24];
  int argc = 0;
  argv[argc] = eval ? "EVAL" : "EVALSHA";
  lens[argc++] = eval ? 4 : 7;
  argv[argc] = eval ? s->body : s->sha;
  lens[argc++] = eval ? strlen(s->body) : 40;
  argv[argc] = nk;
  lens[argc++] = dlock__fmt_i64(nk, (int64_t)k);
  for (size_t i = 0; i < k; i++) {
    argv[argc] = items[i].name;
    lens[argc++] = items[i].name_len;
  }
  argv[argc] = lease;
  lens[argc++] = ll;
  for (size_t i = 0; i < k; i++) {
    argv[argc] = fields[i];
    lens[argc++] = item_field(c, &items[i], fields[i]);
  }
  dlock__sb b;
  char buf[32768];
  dlock__sb_init_buf(&b, buf, sizeof buf);
  dlock__resp_argv(&b, argc, argv, lens);
  /* Written chunk by chunk: a buffer for the whole batch would grow to
   * megabytes for 100k locks. */
  int ok = !b.oom && dlock__link_send(l, b.p, b.len) == 0;
  dlock__sb_free(&b);
  return ok ? 0 : -1;
}

/* Where the chunk starting at item `at` ends (items before `to`): at most
 * WD_CHUNK items, all of one slot (a script's keys must share one on a
 * cluster). */
static size_t chunk_end(const wd_state *st, size_t at, size_t to) {
  size_t e = at + 1;
  while (e < to && e - at < WD_CHUNK && st->items[e].slot == st->items[at].slot)
    e++;
  return e;
}

/* Reads the reply of the chunk items[at..at+k) into st->flags (1 renewed,
 * 0 gone, 4 NOSCRIPT: to be sent again as EVAL; left at 2, unknown, when
 * the chunk failed). 0, or 1 when the connection failed or fell out of step
 * (the rest is unknown too). */
static int read_chunk(dlock_client *c, dlock__link *l, wd_state *st, size_t at,
                      size_t k) {
  redisReply *r = dlock__link_reply(l);
  if (!r)
    return 1;
  if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
    /* Script cache lost (a fresh server, SCRIPT FLUSH): no failure, the
     * chunk goes again as EVAL once this pipeline is read (renew_node). */
    memset(st->flags + at, 4, k);
    freeReplyObject(r);
    return 0;
  }
  if (r->type == REDIS_REPLY_ERROR && c->url.sentinel &&
      dlock__reply_reroutes(r->str, DLOCK__TOPO_SENTINEL)) {
    /* a replica now (READONLY, MASTERDOWN): ask the sentinels again,
     * reconnect (the router's rule, ioverdict.c) */
    dlock__sentinel_invalidate(c, atomic_load(&c->sent.gen));
    freeReplyObject(r);
    return 1;
  }
  if (r->type == REDIS_REPLY_ERROR &&
      (strncmp(r->str, "ASK ", 4) == 0 || strncmp(r->str, "MOVED ", 6) == 0 ||
       strncmp(r->str, "TRYAGAIN", 8) == 0)) {
    /* The slot moved, or is moving (ASK: none of the chunk's keys is here
     * any more; TRYAGAIN: some are): renewed one by one through the
     * router, which follows MOVED and ASK (issue 25.10). */
    memset(st->flags + at, 3, k);
    if (r->str[0] == 'M')
      dlock__cluster_mark_stale(c);
    freeReplyObject(r);
    return 0;
  }
  if (r->type != REDIS_REPLY_STRING || r->len != k) {
    if (r->type == REDIS_REPLY_ERROR) {
      dlock__fail(DLOCK_EREDIS, "renewal: %s", r->str);
      dlock__cluster_mark_stale(c); /* MOVED, CLUSTERDOWN: look again */
    } else {
      dlock__fail(DLOCK_EPROTO, "renewal: unexpected reply");
    }
    freeReplyObject(r);
    return 0;
  }
  for (size_t i = 0; i < k; i++)
    st->flags[at + i] = (char)(r->str[i] == '1');
  freeReplyObject(r);
  return 0;
}

int dlock__wd_wait_bound(const dlock_config *cfg) {
  int b = cfg->watchdog_timeout_ms / 6; /* half a renewal period */
  if (cfg->command_timeout_ms > 0 && cfg->command_timeout_ms < b)
    b = cfg->command_timeout_ms;
  if (cfg->connect_timeout_ms > 0 && cfg->connect_timeout_ms < b)
    b = cfg->connect_timeout_ms;
  return b > 0 ? b : 1;
}

/* Sends the chunks of items[from..to) (with eval: only those answered
 * NOSCRIPT, as EVAL) in one pipeline and reads their replies. 0, or 1 when
 * the connection failed. */
static int node_pass(dlock_client *c, dlock__link *l, wd_state *st, size_t from,
                     size_t to, const char *lease, size_t ll, int eval) {
  int rc = 0;
  size_t sent_to = from;
  uint64_t chunks = 0;
  for (size_t at = from, e; at < to && rc == 0; at = e) {
    e = chunk_end(st, at, to);
    if (eval && st->flags[at] != 4)
      continue;
    if (send_chunk(c, l, st->items + at, e - at, lease, ll, eval) != 0)
      rc = 1;
    chunks++;
    sent_to = e;
  }
  if (chunks == 0)
    return 0;
  dlock__stat_add(&c->stats, DLOCK__ST_COMMANDS, chunks);
  dlock__stat_add(&c->stats, DLOCK__ST_ROUND_TRIPS, 1);
  for (size_t at = from, e; at < sent_to && rc == 0; at = e) {
    e = chunk_end(st, at, to);
    if (eval && st->flags[at] != 4)
      continue;
    if (eval)
      memset(st->flags + at, 2, e - at); /* EVAL is never NOSCRIPT */
    rc = read_chunk(c, l, st, at, e - at);
  }
  return rc;
}

/* Renews items[from..to), all served by one node, in one pipeline (and a
 * second one, of EVALs, for the chunks answered NOSCRIPT). 0, or a
 * negative code when the node's connection failed (its items stay
 * unknown). */
static int renew_node(dlock_client *c, wd_state *st, size_t from, size_t to,
                      const char *lease, size_t ll) {
  dlock__bglink *b = NULL;
  dlock__link *l = dlock__bg_link(c, &st->links, st->items[from].node, &b);
  if (!l) {
    int rc = b ? DLOCK_ECONN : dlock__fail(DLOCK_ENOMEM, "out of memory");
    dlock__bg_drop(c, b);
    return rc;
  }
  int rc = node_pass(c, l, st, from, to, lease, ll, 0);
  int noscript = 0;
  for (size_t i = from; i < to && !noscript; i++)
    noscript = st->flags[i] == 4;
  if (rc == 0 && noscript)
    rc = node_pass(c, l, st, from, to, lease, ll, 1);
  for (size_t i = from; i < to; i++)
    if (st->flags[i] == 4)
      st->flags[i] = 2;
  if (rc == 0)
    return 0;
  rc = l->err != DLOCK__LINK_OK
           ? dlock__link_fail(l, st->links.read_ms, "renewal connection failed")
           : dlock__fail(DLOCK_ECONN, "renewal connection failed");
  dlock__bg_drop(c, b);
  return rc;
}

static int item_order(const void *a, const void *b) {
  const wd_item *x = a, *y = b;
  if (x->node != y->node)
    return (uintptr_t)x->node < (uintptr_t)y->node ? -1 : 1;
  return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Renews one item through the router (which follows MOVED and ASK, and
 * sends no WAIT: a renewal confirms nothing new). 1 renewed, 0 gone, 2 no
 * answer. */
static char renew_routed(dlock_client *c, const wd_item *it, const char *lease,
                         size_t ll) {
  char field[DLOCK__FIELD_MAX];
  const char *keys[1] = {it->name};
  size_t klens[1] = {it->name_len};
  const char *args[2] = {lease, field};
  size_t alens[2] = {ll, item_field(c, it, field)};
  static const dlock__send_how how = {1, 1, 0};
  redisReply *r = NULL;
  int rc = dlock__eval_how(c, dlock__core_script(DLOCK__S_RENEW), 1, keys,
                           klens, 2, args, alens, &how, &r);
  char f = 2;
  if (rc == 0 && r && r->type == REDIS_REPLY_STRING && r->len == 1)
    f = (char)(r->str[0] == '1');
  else if (rc == 0)
    dlock__fail(DLOCK_EPROTO, "renewal: unexpected reply");
  if (r)
    freeReplyObject(r);
  return f;
}

/* Renews items[0..n) in one pipeline per node; fills flags with 1
 * (renewed) / 0 (gone) / 2 (no answer). Items whose node redirected the
 * pipeline (a slot moving or moved) are renewed one by one through the
 * router. Returns 0, or the last node failure's code. Called without
 * reg.mu. */
static int renew_batch(dlock_client *c, wd_state *st, size_t n) {
  if (c->cl) {
    /* The map as it is: a stale or old one is refreshed by the errand
     * thread, never here (a refresh may connect to an unreachable node, or
     * wait for another thread's refresh); a renewal it misroutes is
     * answered MOVED and renewed through the router below. */
    if (atomic_load(&c->cl->stale) ||
        dlock__now_ms() - atomic_load(&c->cl->refreshed_at) >
            DLOCK__CLUSTER_REFRESH_MS)
      dlock__errand_refresh(c);
    for (size_t i = 0; i < n; i++) {
      st->items[i].slot =
          dlock__key_slot(st->items[i].name, st->items[i].name_len);
      st->items[i].node = dlock__cluster_lookup(c, st->items[i].name);
    }
    qsort(st->items, n, sizeof *st->items, item_order);
  }
  char lease[24];
  size_t ll = dlock__fmt_i64(lease, c->cfg.watchdog_timeout_ms);
  memset(st->flags, 2, n);
  int rc = 0;
  for (size_t at = 0, e; at < n; at = e) {
    e = at + 1;
    while (e < n && st->items[e].node == st->items[at].node)
      e++;
    int r = st->items[at].node ? renew_node(c, st, at, e, lease, ll)
                               : DLOCK_ECONN; /* no master known */
    if (r)
      rc = r;
  }
  for (size_t i = 0; i < n; i++)
    if (st->flags[i] == 3)
      st->flags[i] = renew_routed(c, &st->items[i], lease, ll);
  return rc;
}

const char *dlock__lost_why(int lost) {
  switch (lost) {
  case DLOCK__LOST_GONE:
    return "a renewal found its key gone or taken (expired, deleted or "
           "force-unlocked)";
  case DLOCK__LOST_UNRENEWED:
    return "renewals kept failing (server unreachable, paused or too slow) "
           "until its lease ran out";
  case DLOCK__LOST_THREAD_EXIT:
    return "the thread holding it exited without unlocking: renewal stopped "
           "and the key expires with its lease";
  default:
    return "it was lost";
  }
}

typedef struct dlock__lost_note lost_note;
struct dlock__lost_note {
  struct dlock__lost_note *next;
  int why; /* DLOCK__LOST_* */
  char name[];
};

static void note_lost(lost_note **list, const char *name, int why) {
  size_t n = strlen(name);
  lost_note *ln = dlock__malloc(sizeof *ln + n + 1);
  if (!ln)
    return;
  memcpy(ln->name, name, n + 1);
  ln->why = why;
  ln->next = *list;
  *list = ln;
}

/* Runs cfg.on_lock_lost for every note (without reg.mu, which the caller
 * holds) and frees the list. During the callback, dlock_last_error() on
 * this thread says why (dlock.h, on_lock_lost). */
static void report_lost(dlock_client *c, lost_note *lost) {
  if (lost) {
    dlock__mu_unlock(&c->reg.mu);
    for (lost_note *ln = lost; ln; ln = ln->next) {
      /* counted and logged first: the log line comes before the report */
      dlock__stat_add(&c->stats,
                      ln->why == DLOCK__LOST_GONE ? DLOCK__ST_LOST_KEY_GONE
                      : ln->why == DLOCK__LOST_THREAD_EXIT
                          ? DLOCK__ST_LOST_THREAD_EXIT
                          : DLOCK__ST_LOST_UNREACHABLE,
                      1);
      dlock__log(&c->cfg, DLOCK_LOG_ERROR, ln->name, "lost", "lost: %s",
                 dlock__lost_why(ln->why));
      dlock__fail(DLOCK_ELOST, "lock '%s' was lost: %s", ln->name,
                  dlock__lost_why(ln->why));
      dlock__callout_lost(&c->cfg, ln->name);
    }
    dlock__mu_lock(&c->reg.mu);
  }
  while (lost) {
    lost_note *nx = lost->next;
    free(lost);
    lost = nx;
  }
}

void dlock__lost_add(lost_note **list, const char *name, int why) {
  note_lost(list, name, why);
}

void dlock__lost_report(dlock_client *c, lost_note *list) {
  report_lost(c, list);
}

/* The renewal rhythm of one client. */
typedef struct wd_timing {
  int64_t lease, period, retry;
} wd_timing;

/* Sleeps until the earliest watchdog hold is due (at most one period).
 * Returns 1 when some hold is due now. reg.mu held. */
static int wait_due(dlock_client *c, const wd_timing *t) {
  int64_t now = dlock__now_ms(), due = -1;
  for (dlock__hold *h = c->wd.head; h; h = h->wd_next) {
    int64_t d = h->retry_at ? h->retry_at : h->renewed_at + t->period;
    if (due < 0 || d < due)
      due = d;
  }
  if (due >= 0 && due <= now)
    return 1;
  if (due < 0)
    due = now + t->period; /* idle: look again in one period */
  struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, due - now);
  pthread_cond_timedwait(&c->reg.cv, &c->reg.mu, &ts);
  return 0;
}

/* Makes room for one more item. 0 or -1 (out of memory). */
static int grow(wd_state *st, size_t n) {
  if (n < st->cap)
    return 0;
  size_t nc = st->cap ? st->cap * 2 : 256;
  wd_item *ni = realloc(st->items, nc * sizeof *ni);
  if (ni)
    st->items = ni;
  char *nf = realloc(st->flags, nc);
  if (nf)
    st->flags = nf;
  if (!ni || !nf)
    return -1;
  st->cap = nc;
  return 0;
}

/* Collects every hold at least half a period old (or due for retry) into
 * st->items, standard ones first. Returns how many. reg.mu held. */
static size_t collect(dlock_client *c, wd_state *st, const wd_timing *t,
                      int64_t now, size_t *nstd) {
  size_t n = 0;
  *nstd = 0;
  for (dlock__hold *h = c->wd.head; h; h = h->wd_next) {
    int ready =
        h->retry_at ? now >= h->retry_at : now - h->renewed_at >= t->period / 2;
    if (!ready || !h->e)
      continue;
    if (grow(st, n) != 0)
      break;
    const dlock__mutex_ops *ops = dlock__lockent_ops(h->e);
    wd_item it = {h,        ops->renew ? ops : NULL,
                  h->tid,   h->count,
                  h->gen,   NULL,
                  0,        ops->field_suffix ? ops->field_suffix : "",
                  &c->node, 0};
    it.name = dlock__lockent_name(h->e, &it.name_len);
    if (!it.ops) { /* standard holds go first: one pipelined batch */
      if (*nstd < n)
        st->items[n] = st->items[*nstd];
      st->items[(*nstd)++] = it;
    } else {
      st->items[n] = it;
    }
    n++;
  }
  return n;
}

/* Renewals that got no answer in one pass, logged (renew_failed) once
 * reg.mu is released: the first few by name, the rest counted. */
#define WD_FAILS_NAMED 16
typedef struct wd_fails {
  int n, more;
  uint64_t counted; /* failed renewal rounds (renewals_failed) */
  struct {
    char name[160];
    int64_t left; /* ms of the local deadline left */
  } v[WD_FAILS_NAMED];
} wd_fails;

static void fail_note(wd_fails *f, const char *name, size_t len, int64_t left) {
  f->counted++;
  if (f->n == WD_FAILS_NAMED) {
    f->more++;
    return;
  }
  if (len >= sizeof f->v[0].name)
    len = sizeof f->v[0].name - 1;
  memcpy(f->v[f->n].name, name, len);
  f->v[f->n].name[len] = '\0';
  f->v[f->n++].left = left;
}

/* Counts and logs the failures of a pass (reg.mu held; released while
 * the hook runs). why: the batch's error. */
static void report_fails(dlock_client *c, wd_fails *f, const char *why) {
  if (atomic_load(&c->closing))
    return; /* dlock_client_free ended the renewals in flight */
  if (f->counted)
    dlock__stat_add(&c->stats, DLOCK__ST_RENEWALS_FAILED, f->counted);
  if (f->n == 0)
    return;
  if (!dlock__log_on(&c->cfg, DLOCK_LOG_WARN))
    return;
  dlock__mu_unlock(&c->reg.mu);
  for (int i = 0; i < f->n; i++) {
    int64_t left = f->v[i].left > 0 ? f->v[i].left : 0;
    dlock__log(&c->cfg, DLOCK_LOG_WARN, f->v[i].name, "renew_failed",
               "renewal of '%s' failed: %lld.%lld s of lease left (%s)",
               f->v[i].name, (long long)(left / 1000),
               (long long)(left % 1000 / 100), why[0] ? why : "no answer");
  }
  if (f->more)
    dlock__log(&c->cfg, DLOCK_LOG_WARN, NULL, "renew_failed",
               "renewals of %d more holds failed (%s)", f->more,
               why[0] ? why : "no answer");
  dlock__mu_lock(&c->reg.mu);
}

/* Records what a batch sent at sent_at found (reg.mu held): renewed holds
 * get a new local deadline, gone ones are lost (noted in *lost), and ones
 * without an answer are retried unless their deadline passed. */
static void apply(dlock_client *c, const wd_state *st, const wd_timing *t,
                  size_t n, int64_t sent_at, lost_note **lost,
                  wd_fails *fails) {
  int64_t now = dlock__now_ms();
  for (size_t i = 0; i < n; i++) {
    dlock__hold *h = st->items[i].h;
    if (!h->in_wd || h->gen != st->items[i].gen || h->count == 0)
      continue; /* released meanwhile: the reply says nothing about it */
    int answered = st->flags[i] != 2; /* a failed node's items: 2 */
    if (!answered && !dlock__release_may_have_run(h)) {
      /* logged every time; counted once per renewal round */
      int first = h->fail_logged < h->renewed_at + t->period;
      fail_note(fails, st->items[i].name, st->items[i].name_len,
                h->valid_until - now);
      fails->counted -= !first;
      h->fail_logged = now;
    }
    switch (dlock__eng_renew_answer(h, answered, st->flags[i] == 1, sent_at,
                                    t->lease, now)) {
    case DLOCK__ENG_END_QUIET:
      dlock__wd_remove(c, h);
      break;
    case DLOCK__ENG_LOST:
      dlock__wd_remove(c, h);
      note_lost(lost, st->items[i].name, h->lost);
      break;
    case DLOCK__ENG_RETRY:
      h->retry_at = now + t->retry;
      break;
    default:
      break;
    }
  }
}

/* One pass: renews what is due (without reg.mu, which the caller holds and
 * gets back), then records and reports the outcome. */
static void renew_due(dlock_client *c, wd_state *st, const wd_timing *t) {
  int64_t now = dlock__now_ms();
  size_t nstd;
  size_t n = collect(c, st, t, now, &nstd);
  if (n == 0) {
    /* Allocation failed: try again shortly rather than spin. */
    for (dlock__hold *h = c->wd.head; h; h = h->wd_next)
      if (!h->retry_at && now - h->renewed_at >= t->period)
        h->retry_at = now + t->retry;
    return;
  }
  c->wd.busy = 1;
  dlock__mu_unlock(&c->reg.mu);
  memset(st->flags, 0, n);
  int64_t sent_at = dlock__now_ms();
  dlock__stat_add(&c->stats, DLOCK__ST_RENEWALS_SENT, n);
  char why[200] = "";
  if (nstd && renew_batch(c, st, nstd) != 0) /* failures: flags stay 2 */
    snprintf(why, sizeof why, "%s", dlock_last_error());
  /* Custom renewals (read locks) go through the router: its retries end
   * at the renewal path's bound (the call's deadline: conn.c), as its
   * connects do (the I/O guard). */
  dlock__budget bound;
  for (size_t i = nstd; i < n; i++) {
    const wd_item *it = &st->items[i];
    dlock__budget_start(&bound, NULL, st->links.read_ms);
    int r = it->ops->renew(c, it->name, it->name_len, it->tid, it->count);
    dlock__call_deadline_reset();
    st->flags[i] = (char)(r == 1 ? 1 : (r == 0 ? 0 : 2));
    if (r < 0 && !why[0])
      snprintf(why, sizeof why, "%s", dlock_last_error());
  }
  lost_note *lost = NULL;
  wd_fails fails;
  fails.n = fails.more = 0;
  fails.counted = 0;
  dlock__mu_lock(&c->reg.mu);
  apply(c, st, t, n, sent_at, &lost, &fails);
  dlock__hold_grave_empty(c);
  c->wd.busy = 0;
  pthread_cond_broadcast(&c->reg.cv);
  report_fails(c, &fails, why);
  report_lost(c, lost);
}

static void *wd_main(void *arg) {
  dlock_client *c = arg;
  wd_state st = {0};
  wd_timing t;
  t.lease = c->cfg.watchdog_timeout_ms;
  t.period = t.lease / 3 > 0 ? t.lease / 3 : 1;
  t.retry = t.period / 4 < 1000 ? (t.period / 4 > 0 ? t.period / 4 : 1) : 1000;
  /* Every wait of this thread on the network: at most half a period, and
   * over when the client is freed; never for another thread's refresh. */
  st.links.read_ms = dlock__wd_wait_bound(&c->cfg);
  st.links.who = "watchdog";
  dlock__io_guard(c->abort_pipe[0], st.links.read_ms, 1);
  dlock__mu_lock(&c->reg.mu);
  while (!c->wd.stop) {
    if (!wait_due(c, &t))
      continue;
    renew_due(c, &st, &t);
    if (st.cap > 4096) {
      /* A pass over many holds: give the arrays back until the next one
       * (they would otherwise cost ~50 bytes per held lock for good). */
      free(st.items);
      free(st.flags);
      st.items = NULL;
      st.flags = NULL;
      st.cap = 0;
    }
  }
  dlock__mu_unlock(&c->reg.mu);
  dlock__bg_close(&st.links);
  free(st.items);
  free(st.flags);
  return NULL;
}

/* ---- the expiry thread ----------------------------------------------------
 * Declares a watchdog hold lost the moment its local deadline passes
 * without a confirmed renewal -- independently of the renewal thread, which
 * may be blocked in a renewal the network swallowed. The key cannot have
 * expired on the server before that deadline (it is computed from the send
 * time of the last confirmed renewal, minus a drift margin), so the holder
 * learns of the loss before anyone else can take the lock. */
static void *exp_main(void *arg) {
  dlock_client *c = arg;
  const int64_t lease = c->cfg.watchdog_timeout_ms;
  const int64_t idle =
      dlock__eng_deadline(0, lease) > 1 ? dlock__eng_deadline(0, lease) : 1;
  const int64_t period = lease / 3 > 0 ? lease / 3 : 1;
  dlock__mu_lock(&c->reg.mu);
  while (!c->wd.stop) {
    int64_t now = dlock__now_ms();
    /* At most a quarter period: a hold added meanwhile (dlock__wd_add
     * wakes no one) is looked at within a quarter period of its renewal
     * being late. */
    int64_t next = now + (idle < period / 4 + 1 ? idle : period / 4 + 1);
    lost_note *lost = NULL;
    wd_fails late;
    late.n = late.more = 0;
    late.counted = 0;
    dlock__hold *h = c->wd.head;
    while (h) {
      dlock__hold *nx = h->wd_next;
      switch (dlock__eng_expiry(h, now, &next)) {
      case DLOCK__ENG_END_QUIET:
        dlock__wd_remove(c, h); /* renewals end, nothing to report */
        break;
      case DLOCK__ENG_LOST:
        dlock__wd_remove(c, h);
        note_lost(&lost, dlock__lockent_name(h->e, NULL), h->lost);
        break;
      case DLOCK__ENG_KEEP:
        /* A renewal late by half a period is told now, while the lease
         * runs (whatever holds the watchdog thread). */
        if (dlock__eng_renew_late(h, now, period, &next)) {
          size_t nl;
          const char *nm = dlock__lockent_name(h->e, &nl);
          fail_note(&late, nm, nl, h->valid_until - now);
        }
        break;
      default:
        break;
      }
      h = nx;
    }
    if (late.n) {
      char why[64];
      snprintf(why, sizeof why, "not confirmed for %lld ms",
               (long long)period + period / 2);
      report_fails(c, &late, why);
    }
    if (lost) {
      report_lost(c, lost);
      continue;
    }
    if (late.n)
      continue;
    c->wd.exp_wake_at = next;
    struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, next - now);
    pthread_cond_timedwait(&c->wd.exp_cv, &c->reg.mu, &ts);
  }
  dlock__mu_unlock(&c->reg.mu);
  return NULL;
}

int dlock__watchdog_start(dlock_client *c) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int cvrc = pthread_cond_init(&c->wd.exp_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (cvrc != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot create a condition variable");
  if (dlock__thread_start(&c->wd.thread, wd_main, c) != 0) {
    pthread_cond_destroy(&c->wd.exp_cv);
    return dlock__fail(DLOCK_ENOMEM, "cannot start the watchdog thread");
  }
  c->wd.started = 1;
  if (dlock__thread_start(&c->wd.exp_thread, exp_main, c) != 0) {
    dlock__watchdog_stop(c);
    return dlock__fail(DLOCK_ENOMEM, "cannot start the expiry thread");
  }
  c->wd.exp_started = 1;
  return 0;
}

void dlock__watchdog_stop(dlock_client *c) {
  if (!c->wd.started)
    return;
  dlock__mu_lock(&c->reg.mu);
  c->wd.stop = 1;
  pthread_cond_broadcast(&c->reg.cv);
  pthread_cond_broadcast(&c->wd.exp_cv);
  dlock__mu_unlock(&c->reg.mu);
  pthread_join(c->wd.thread, NULL);
  c->wd.started = 0;
  if (c->wd.exp_started) {
    pthread_join(c->wd.exp_thread, NULL);
    c->wd.exp_started = 0;
  }
  pthread_cond_destroy(&c->wd.exp_cv);
}
