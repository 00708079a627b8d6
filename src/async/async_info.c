/*
 * async_info.c -- the event-loop client's info key: the same hash the
 * blocking client keeps (clientinfo.c, clientnotes.c; docs/design.md),
 * "dlock_client:{<client id>}" with host, pid, program, started, conn_name,
 * client ("async"), checked and every, since:<owner>:<name> per hold and
 * wait:<owner>:<name> per waiting call -- so `dlock status`, `list`, `top`
 * and the exporter name an async holder or waiter like any other (issue 39;
 * until then the event-loop client wrote none and its holders showed as
 * "no client info").
 *
 * WHEN. A loop timer of its own, never the watchdog's renewal tick: the
 * first lock call writes DLOCK__SINCE_AFTER_MS later (who the client is,
 * and the hold or wait if it lasted), then a write every
 * renewal period (watchdog_timeout_ms / 3; the key's TTL is the watchdog
 * timeout, so it expires with the client), and between those only when a
 * hold or a wait has lasted DLOCK__SINCE_AFTER_MS unpublished (a look at
 * that time) or a published one ended (at most one write per
 * DLOCK__INFO_GAP_MS). So a loop that locks and unlocks briefly sends
 * nothing more per pair, as the blocking client.
 *
 * BOUNDED. One round of writes in flight at a time (a round whose writes
 * have not all answered is skipped), sent once (no retry: the next round
 * replaces it), without a WAIT, pipelined on the command connection like any
 * request (it delays no renewal: the loop never waits for it), at most
 * DLOCK__INFO_HOLDS_MAX entries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/async.h"

struct dlock__ainfo {
  dlock_async *a;
  dlock__atimer t;
  int busy;         /* writes in flight (the key and its copies) */
  int64_t last_end; /* when the last write was answered (monotonic) */
  int64_t next_at;  /* the next periodic write */
  int dirty;        /* write at the next round: the first, or an end */
};

static int64_t period(const dlock_async *a) {
  int64_t p = a->cfg.watchdog_timeout_ms / 3;
  return p > 0 ? p : 1;
}

static void fire(dlock__atimer *t);

/* Arms the timer for `at` unless it fires sooner already. */
static void arm(dlock__ainfo *in, int64_t at) {
  if (in->t.slot && in->t.at <= at)
    return;
  in->t.fn = fire;
  in->t.arg = in;
  dlock__async_timer(in->a, &in->t, at);
}

void dlock__ainfo_want(dlock_async *a, dlock__aop *op) {
  int64_t now = dlock__async_now();
  op->began_at = now;
  op->began_ms = dlock__wall_ms();
  if (!a->info) {
    if (!(a->info = dlock__calloc(1, sizeof *a->info)))
      return; /* no info key: the locks work all the same */
    a->info->a = a;
    a->info->dirty = 1; /* who the client is: the first look writes */
  }
  arm(a->info, now + DLOCK__SINCE_AFTER_MS); /* publish it if it lasts */
}

void dlock__ainfo_ended(dlock_async *a, const dlock__aop *op,
                        const dlock__ahold *h) {
  if (!a->info || a->closing)
    return;
  int gone = op->info_pub || (op->unlock && h->h.count == 0 && h->h.since_pub);
  int64_t now = dlock__async_now();
  if (gone) {
    a->info->dirty = 1;
    int64_t at = a->info->last_end + DLOCK__INFO_GAP_MS;
    arm(a->info, at > now ? at : now);
  }
  if (!op->unlock && op->rc == 0 && h->h.count > 0 && !h->h.since_pub) {
    arm(a->info, now + DLOCK__SINCE_AFTER_MS); /* a hold began: if it lasts */
  }
}

/* The write's answer: the next round may send again. */
static void written(dlock__areq *r, redisReply *reply, int err,
                    const char *why) {
  (void)err;
  (void)why;
  dlock__ainfo *in = r->arg;
  dlock__areq_free(r); /* the callee's, as every request's */
  if (reply)
    freeReplyObject(reply);
  if (in->busy > 0 && --in->busy == 0)
    in->last_end = dlock__async_now();
}

static void soonest(int64_t *at, int64_t t) {
  if (*at == 0 || t < *at)
    *at = t;
}

/* Appends "field\0value\0" for the current holds and waits that have
 * lasted DLOCK__SINCE_AFTER_MS (or were published), marking them; returns
 * how many pairs. *due: one of them was not published yet; *later: when
 * the youngest left out gets old enough (0: none). */
static int entries(dlock_async *a, dlock__sb *b, int64_t now, int *due,
                   int64_t *later) {
  int k = 0;
  *later = 0;
  for (size_t i = 0; i < a->holds.nb; i++)
    for (dlock__map_ent *e = a->holds.b[i]; e && k < DLOCK__INFO_HOLDS_MAX;
         e = e->next) {
      dlock__ahold *h = e->val;
      if (h->h.count <= 0 || h->h.lost)
        continue;
      if (!h->h.since_pub && now - h->h.since_at < DLOCK__SINCE_AFTER_MS) {
        soonest(later, h->h.since_at + DLOCK__SINCE_AFTER_MS);
        continue;
      }
      *due |= !h->h.since_pub;
      h->h.since_pub = 1;
      char o[24], v[24];
      dlock__fmt_i64(o, h->owner);
      dlock__fmt_i64(v, h->h.since_ms);
      dlock__sb_adds(b, "since:");
      dlock__sb_adds(b, o);
      dlock__sb_add(b, ":", 1);
      dlock__sb_add(b, h->key, h->name_len + 1);
      dlock__sb_add(b, v, strlen(v) + 1);
      k++;
    }
  for (dlock__aop *op = a->ops; op && k < DLOCK__INFO_HOLDS_MAX;
       op = op->next) {
    if (op->unlock || !op->h || !op->sub)
      continue;
    if (!op->info_pub && now - op->began_at < DLOCK__SINCE_AFTER_MS) {
      soonest(later, op->began_at + DLOCK__SINCE_AFTER_MS);
      continue;
    }
    *due |= !op->info_pub;
    op->info_pub = 1;
    char o[24], v[24];
    dlock__fmt_i64(o, op->h->owner);
    dlock__fmt_i64(v, op->began_ms);
    dlock__sb_adds(b, "wait:");
    dlock__sb_adds(b, o);
    dlock__sb_add(b, ":", 1);
    dlock__sb_add(b, op->h->key, op->h->name_len + 1);
    dlock__sb_add(b, v, strlen(v) + 1);
    k++;
  }
  return k;
}

/* The write script's ARGV (ttl, host, pid, program, started, then pairs)
 * into argv/lens from the NUL-separated strings of s (n of them). */
static void split(const dlock__sb *s, int n, const char **argv, size_t *lens) {
  const char *p = s->p;
  for (int i = 0; i < n; i++) {
    argv[i] = p;
    lens[i] = strlen(p);
    p += lens[i] + 1;
  }
}

/* Submits one write of the info key (or of its copy) `key`. 0, or -1. */
static int submit(dlock__ainfo *in, const char *key, const char **argv,
                  const size_t *lens, int n) {
  const char *keys[1] = {key};
  size_t klens[1] = {strlen(key)};
  dlock__areq *r = dlock__areq_eval(dlock__info_script(), 1, keys, klens, n,
                                    argv, lens, written, in);
  if (!r)
    return -1;
  r->no_retry = 1;
  r->no_sync = 1;
  in->busy++;
  dlock__aconn_submit(&in->a->cmd, r);
  return 0;
}

/* Sends one write of the key (at least once a period; then when due), and
 * on a cluster one of each copy on the other masters (names.c's tags, as
 * the blocking client writes them: a tool names this client's holds on
 * the masters that answer when the key's own master does not). */
static void send_write(dlock__ainfo *in, dlock__sb *s, int n) {
  dlock_async *a = in->a;
  char key[64];
  snprintf(key, sizeof key, "dlock_client:{%s}", a->id);
  const char **argv = dlock__calloc((size_t)n, sizeof *argv);
  size_t *lens = dlock__calloc((size_t)n, sizeof *lens);
  if (argv && lens) {
    split(s, n, argv, lens);
    char tags[DLOCK__INFO_COPIES_MAX][8];
    int nt = submit(in, key, argv, lens, n) == 0
                 ? dlock__aroute_info_tags(a, key, strlen(key), tags,
                                           DLOCK__INFO_COPIES_MAX)
                 : 0;
    for (int i = 0; i < nt; i++) {
      char ck[sizeof a->id + 32];
      snprintf(ck, sizeof ck, "dlock_client:{%.7s}:%s", tags[i], a->id);
      if (submit(in, ck, argv, lens, n) != 0)
        break;
    }
  }
  free(argv);
  free(lens);
}

/* Appends a NUL-terminated string. */
static void str0(dlock__sb *b, const char *s) {
  dlock__sb_add(b, s, strlen(s) + 1);
}

static void fire(dlock__atimer *t) {
  dlock__ainfo *in = t->arg;
  dlock_async *a = in->a;
  int64_t now = dlock__async_now();
  if (in->busy || a->closing) {
    arm(in, now + DLOCK__INFO_GAP_MS);
    return;
  }
  char host[256] = "", num[5][24];
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "?");
  dlock__fmt_i64(num[0], a->cfg.watchdog_timeout_ms);
  dlock__fmt_i64(num[1], (int64_t)getpid());
  dlock__fmt_i64(num[2], a->started_ms);
  dlock__fmt_i64(num[3], dlock__wall_ms());
  dlock__fmt_i64(num[4], period(a));
  const char *prog = program_invocation_short_name;
  dlock__sb s;
  dlock__sb_init(&s);
  str0(&s, num[0]);
  str0(&s, host);
  str0(&s, num[1]);
  str0(&s, prog && *prog ? prog : "?");
  str0(&s, num[2]);
  const char *fixed[][2] = {{"client", "async"},
                            {"checked", num[3]},
                            {"every", num[4]},
                            {"conn_name", a->conn_name}};
  int n = 5;
  for (int i = 0; i < 4; i++, n += 2) {
    if (!fixed[i][1])
      break;
    str0(&s, fixed[i][0]);
    str0(&s, fixed[i][1]);
  }
  int due = 0;
  int64_t later = 0;
  n += 2 * entries(a, &s, now, &due, &later);
  /* Periodic, or a hold or a wait newly worth publishing, or an end. */
  if (!s.oom && (due || in->dirty || now >= in->next_at)) {
    send_write(in, &s, n);
    in->dirty = 0;
    in->next_at = now + period(a);
  }
  dlock__sb_free(&s);
  arm(in, later && later < in->next_at ? later : in->next_at);
}

void dlock__ainfo_close(dlock_async *a) {
  if (!a->info)
    return;
  dlock__async_untimer(a, &a->info->t);
  free(a->info);
  a->info = NULL;
}
