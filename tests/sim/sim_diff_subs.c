/*
 * sim_diff_subs.c -- the lockstep runner's subscribers (sim_diff.h): one
 * subscriber connection per client id on the server, the same
 * subscriptions in the model's pub/sub (its PUBLISH receiver counts and
 * PUBSUB NUMSUB come from here), and every message the model delivers read
 * back from the server's connection and compared, in order. Subscriptions
 * end with UNSUBSCRIBE, never by closing a connection: the server handles
 * a close later, and a PUBLISH meanwhile would count a subscriber the
 * model no longer has.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_diff_int.h"

/* ---- channel sets ---- */

int sim_chset_has(const sim_chset *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->n; i++)
    if (s->len[i] == n && memcmp(s->p[i], p, n) == 0)
      return 1;
  return 0;
}

void sim_chset_add(sim_chset *s, const char *p, size_t n) {
  if (sim_chset_has(s, p, n))
    return;
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->p = realloc(s->p, s->cap * sizeof *s->p);
    s->len = realloc(s->len, s->cap * sizeof *s->len);
    CHECK(s->p && s->len);
  }
  s->p[s->n] = malloc(n + 1);
  CHECK(s->p[s->n] != NULL);
  memcpy(s->p[s->n], p, n);
  s->p[s->n][n] = '\0';
  s->len[s->n++] = n;
}

int sim_chset_del(sim_chset *s, const char *p, size_t n) {
  for (size_t i = 0; i < s->n; i++)
    if (s->len[i] == n && memcmp(s->p[i], p, n) == 0) {
      free(s->p[i]);
      s->p[i] = s->p[s->n - 1];
      s->len[i] = s->len[s->n - 1];
      s->n--;
      return 1;
    }
  return 0;
}

void sim_chset_free(sim_chset *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->p[i]);
  free(s->p);
  free(s->len);
  memset(s, 0, sizeof *s);
}

/* ---- the model's pub/sub ---- */

static void push_msg(sim_sub *s, int sharded, const char *ch, size_t chl,
                     const char *msg, size_t ml) {
  if (s->qn == s->qcap) {
    s->qcap = s->qcap ? s->qcap * 2 : 16;
    s->q = realloc(s->q, s->qcap * sizeof *s->q);
    CHECK(s->q != NULL);
  }
  sim_msg *m = &s->q[s->qn++];
  m->sharded = sharded;
  m->ch = malloc(chl + 1);
  m->msg = malloc(ml + 1);
  CHECK(m->ch && m->msg);
  memcpy(m->ch, ch, chl);
  memcpy(m->msg, msg, ml);
  m->chl = chl;
  m->ml = ml;
}

long long sim_subs_publish(void *user, int sharded, const char *ch, size_t chl,
                           const char *msg, size_t ml) {
  sim_diff *d = user;
  sim_chset_add(&d->published[sharded ? 1 : 0], ch, chl);
  long long n = 0;
  for (size_t i = 0; i < d->nsubs; i++) {
    sim_sub *s = &d->subs[i];
    if (sim_chset_has(sharded ? &s->shard : &s->plain, ch, chl)) {
      push_msg(s, sharded, ch, chl, msg, ml);
      n++;
    }
  }
  d->st.messages += (unsigned long)n;
  return n;
}

long long sim_subs_numsub(void *user, int sharded, const char *ch, size_t chl) {
  sim_diff *d = user;
  long long n = 0;
  for (size_t i = 0; i < d->nsubs; i++)
    n +=
        sim_chset_has(sharded ? &d->subs[i].shard : &d->subs[i].plain, ch, chl);
  return n;
}

/* ---- subscriber connections ---- */

static sim_sub *sub_of(sim_diff *d, int id) {
  for (size_t i = 0; i < d->nsubs; i++)
    if (d->subs[i].id == id)
      return &d->subs[i];
  d->subs = realloc(d->subs, (d->nsubs + 1) * sizeof *d->subs);
  CHECK(d->subs != NULL);
  sim_sub *s = &d->subs[d->nsubs++];
  memset(s, 0, sizeof *s);
  s->id = id;
  s->c = th_redis_raw(d->r);
  struct timeval tv = {10L * th_timeout_mult(), 0};
  redisSetTimeout(s->c, tv);
  return s;
}

static redisReply *read_one(sim_diff *d, sim_sub *s, const char *waiting) {
  void *x = NULL;
  if (redisGetReply(s->c, &x) != REDIS_OK || !x) {
    char what[300];
    snprintf(what, sizeof what,
             "subscriber c%d: no reply from redis-server while waiting for "
             "%s (%s)",
             s->id, waiting, s->c->errstr);
    sim_fail(d, what, "  (the model delivered it; the server did not)");
  }
  return x;
}

static int is_word(const redisReply *r, const char *w) {
  return r->type == REDIS_REPLY_STRING && r->len == strlen(w) &&
         memcmp(r->str, w, r->len) == 0;
}

static void fail_msg(sim_diff *d, sim_sub *s, const redisReply *got,
                     const sim_msg *want) {
  char a[900] = "(none)",
       b[900] = "(nothing: a message the model did not "
                "deliver)",
       e1[300], e2[300];
  if (got && got->type == REDIS_REPLY_ARRAY && got->elements == 3 &&
      got->element[1]->type == REDIS_REPLY_STRING &&
      got->element[2]->type == REDIS_REPLY_STRING) {
    sim_escape(got->element[1]->str, got->element[1]->len, 200, e1, sizeof e1);
    sim_escape(got->element[2]->str, got->element[2]->len, 200, e2, sizeof e2);
    snprintf(a, sizeof a, "%s %s \"%s\"", got->element[0]->str, e1, e2);
  } else if (got) {
    snprintf(a, sizeof a, "a reply of type %d", got->type);
  }
  if (want) {
    sim_escape(want->ch, want->chl, 200, e1, sizeof e1);
    sim_escape(want->msg, want->ml, 200, e2, sizeof e2);
    snprintf(b, sizeof b, "%s %s \"%s\"",
             want->sharded ? "smessage" : "message", e1, e2);
  }
  char detail[2000], what[120];
  snprintf(detail, sizeof detail,
           "  redis-server delivered: %s\n  model:      "
           "           %s",
           a, b);
  snprintf(what, sizeof what, "a message to subscriber c%d", s->id);
  sim_fail(d, what, detail);
}

static void free_msg(sim_msg *m) {
  free(m->ch);
  free(m->msg);
}

void sim_subs_drain(sim_diff *d) {
  for (size_t i = 0; i < d->nsubs; i++) {
    sim_sub *s = &d->subs[i];
    for (size_t k = 0; k < s->qn; k++) {
      sim_msg *w = &s->q[k];
      redisReply *r = read_one(d, s, "a published message");
      int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
               is_word(r->element[0], w->sharded ? "smessage" : "message") &&
               r->element[1]->len == w->chl &&
               memcmp(r->element[1]->str, w->ch, w->chl) == 0 &&
               r->element[2]->type == REDIS_REPLY_STRING &&
               r->element[2]->len == w->ml &&
               memcmp(r->element[2]->str, w->msg, w->ml) == 0;
      if (!ok)
        fail_msg(d, s, r, w);
      freeReplyObject(r);
      free_msg(w);
    }
    s->qn = 0;
  }
}

/* Reads one (un)subscribe confirmation: its kind must be `kind`; returns
 * it (the caller checks the channel and the count). */
static redisReply *confirmation(sim_diff *d, sim_sub *s, const char *kind) {
  redisReply *r = read_one(d, s, kind);
  if (!(r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        is_word(r->element[0], kind) &&
        r->element[2]->type == REDIS_REPLY_INTEGER)) {
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        (is_word(r->element[0], "message") ||
         is_word(r->element[0], "smessage")))
      fail_msg(d, s, r, NULL);
    char what[200];
    snprintf(what, sizeof what, "subscriber c%d: an odd %s confirmation", s->id,
             kind);
    sim_fail(d, what, "  (not [kind, channel, count])");
  }
  return r;
}

static void check_count(sim_diff *d, sim_sub *s, const redisReply *r,
                        long long want) {
  if (r->element[2]->integer != want) {
    char what[200];
    snprintf(what, sizeof what,
             "subscriber c%d: the server counts %lld subscriptions, the "
             "model %lld",
             s->id, r->element[2]->integer, want);
    sim_fail(d, what, "  (a subscription confirmation)");
  }
}

/* UNSUBSCRIBE / SUNSUBSCRIBE without channels: one confirmation per
 * channel, in the server's (hash table) order. */
static void unsubscribe_all(sim_diff *d, sim_sub *s, int sharded) {
  const char *kind = sharded ? "sunsubscribe" : "unsubscribe";
  sim_chset *set = sharded ? &s->shard : &s->plain;
  size_t n = set->n;
  redisAppendCommand(s->c, sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
  for (size_t k = 0; k < (n ? n : 1); k++) {
    redisReply *r = confirmation(d, s, kind);
    if (n && !(r->element[1]->type == REDIS_REPLY_STRING &&
               sim_chset_del(set, r->element[1]->str, r->element[1]->len)))
      sim_fail(d, "an unsubscription of a channel the model did not have",
               "  (UNSUBSCRIBE without channels)");
    check_count(d, s, r, (long long)set->n);
    freeReplyObject(r);
  }
}

void sim_subs_exec(sim_diff *d, int conn, int argc, const char *const *argv,
                   const size_t *lens) {
  char name[16] = {0};
  for (size_t i = 0; i < lens[0] && i < sizeof name - 1; i++)
    name[i] =
        (char)(argv[0][i] >= 'A' && argv[0][i] <= 'Z' ? argv[0][i] - 'A' + 'a'
                                                      : argv[0][i]);
  if (name[0] == 'p')
    sim_fail(d, "PSUBSCRIBE / PUNSUBSCRIBE: patterns are not modelled",
             "  (no code of the library subscribes to a pattern)");
  sim_sub *s = sub_of(d, conn);
  int sharded =
      strcmp(name, "ssubscribe") == 0 || strcmp(name, "sunsubscribe") == 0;
  int sub = strstr(name, "unsub") == NULL;
  sim_chset *set = sharded ? &s->shard : &s->plain;
  if (!sub && argc == 1) {
    unsubscribe_all(d, s, sharded);
    return;
  }
  redisAppendCommandArgv(s->c, argc, (const char **)argv, lens);
  for (int i = 1; i < argc; i++) {
    if (sub)
      sim_chset_add(set, argv[i], lens[i]);
    else
      sim_chset_del(set, argv[i], lens[i]);
    redisReply *r = confirmation(d, s, name);
    if (!(r->element[1]->len == lens[i] &&
          memcmp(r->element[1]->str, argv[i], lens[i]) == 0))
      sim_fail(d, "a subscription confirmation names another channel",
               "  (SUBSCRIBE confirms its channels in order)");
    check_count(d, s, r, (long long)set->n);
    freeReplyObject(r);
  }
}

void sim_subs_check_quiet(sim_diff *d) {
  for (size_t i = 0; i < d->nsubs; i++) {
    sim_sub *s = &d->subs[i];
    redisAppendCommand(s->c, "PING");
    redisReply *r = read_one(d, s, "PING's answer");
    /* ["pong", ""] while subscribed, +PONG once it has no subscription */
    if (!(r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
          is_word(r->element[0], "pong")) &&
        !(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0))
      fail_msg(d, s, r, NULL);
    freeReplyObject(r);
  }
}

void sim_subs_drop_all(sim_diff *d) {
  for (size_t i = 0; i < d->nsubs; i++) {
    unsubscribe_all(d, &d->subs[i], 0);
    unsubscribe_all(d, &d->subs[i], 1);
  }
}

void sim_subs_free(sim_diff *d) {
  for (size_t i = 0; i < d->nsubs; i++) {
    sim_sub *s = &d->subs[i];
    redisFree(s->c);
    sim_chset_free(&s->plain);
    sim_chset_free(&s->shard);
    for (size_t k = 0; k < s->qn; k++)
      free_msg(&s->q[k]);
    free(s->q);
  }
  free(d->subs);
  d->subs = NULL;
  d->nsubs = 0;
}
