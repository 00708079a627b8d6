/*
 * clientnotes.c -- what the blocking client's info key says besides who it
 * is and what it holds (clientinfo.c, holds.c): when it last checked in,
 * which threads wait for which lock since when, which expirable permits it
 * took, and the kind of its locks that are no plain mutex (issue 39: "the
 * operator's picture"). `dlock list`, `top`, `status` and the exporter
 * read them to name every waiter with the time its wait began, every permit
 * holder, and a fair, fenced or spin lock as such even when no key says so.
 *
 * FIELDS (docs/design.md, the client info key), each "field" -> value:
 *   client            "blocking" (the event-loop client writes "async")
 *   checked           wall ms of this write: when the client last checked in
 *   every             ms between two writes at most (the key lives 3 x that)
 *   wait:<tid>:<name> wall ms thread tid began to wait for lock `name` (any
 *                     kind: the mutex family, read-write sides, semaphore,
 *                     latch, permits)
 *   permit:<id>       "<wall ms>|<name>": a permit of `name` this client took
 *                     and has not released (32 hex digits, as users see it)
 *   kind:<name>       "fair", "fenced" or "spin": the kind of a lock of which
 *                     the client has objects (a plain mutex has none)
 *
 * COST. A wait or a permit is noted in memory (reg.mu, no Redis traffic);
 * like a hold's start (holds.c), it is published by the next info write once
 * it has lasted DLOCK__SINCE_AFTER_MS, and its end makes the next write come
 * soon -- so a wait or permit shorter than that costs nothing, and the lock
 * calls send nothing more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/client.h"

struct dlock__note {
  struct dlock__note *next;
  int permit;                 /* 0: a wait */
  uint64_t tid;               /* a wait's thread */
  const void *obj;            /* a permit's dlock_permits object */
  char id[33];                /* a permit's id */
  int64_t since_ms, since_at; /* wall, monotonic */
  int published;
  char name[];
};

/* A new note (reg.mu held); the watchdog thread looks at it when it may
 * be published. NULL on OOM (the note is skipped). */
static dlock__note *note_add(dlock_client *c, const char *name) {
  size_t nl = strlen(name);
  dlock__note *n = dlock__calloc(1, sizeof *n + nl + 1);
  if (!n)
    return NULL;
  memcpy(n->name, name, nl + 1);
  n->since_ms = dlock__wall_ms();
  n->since_at = dlock__now_ms();
  n->next = c->notes;
  c->notes = n;
  dlock__info_want(c);
  dlock__info_since_later(c);
  return n;
}

/* Unlinks and frees n (reg.mu held); a published one is dropped from the
 * key by a write soon. */
static void note_del(dlock_client *c, dlock__note *n) {
  for (dlock__note **p = &c->notes; *p; p = &(*p)->next)
    if (*p == n) {
      *p = n->next;
      if (n->published)
        dlock__info_soon(c);
      free(n);
      return;
    }
}

void *dlock__note_wait(dlock_client *c, const char *name, uint64_t tid) {
  dlock__mu_lock(&c->reg.mu);
  dlock__note *n = note_add(c, name);
  if (n)
    n->tid = tid;
  dlock__mu_unlock(&c->reg.mu);
  return n;
}

void dlock__note_wait_end(dlock_client *c, void *note) {
  if (!note)
    return;
  dlock__mu_lock(&c->reg.mu);
  note_del(c, note);
  dlock__mu_unlock(&c->reg.mu);
}

void dlock__note_permit(dlock_client *c, const void *obj, const char *name,
                        const char *id) {
  dlock__mu_lock(&c->reg.mu);
  dlock__note *n = note_add(c, name);
  if (n) {
    n->permit = 1;
    n->obj = obj;
    snprintf(n->id, sizeof n->id, "%s", id);
  }
  dlock__mu_unlock(&c->reg.mu);
}

void dlock__note_permit_end(dlock_client *c, const void *obj, const char *id) {
  dlock__mu_lock(&c->reg.mu);
  for (dlock__note *n = c->notes, *nx; n; n = nx) {
    nx = n->next;
    if (n->permit && (id ? strcasecmp(n->id, id) == 0 : n->obj == obj))
      note_del(c, n);
  }
  dlock__mu_unlock(&c->reg.mu);
}

int dlock__notes_due(dlock_client *c, int64_t now, int64_t *next) {
  int due = 0;
  *next = 0;
  for (dlock__note *n = c->notes; n; n = n->next) {
    if (n->published)
      continue;
    int64_t at = n->since_at + DLOCK__SINCE_AFTER_MS;
    if (at <= now)
      due = 1;
    else if (*next == 0 || at < *next)
      *next = at;
  }
  return due;
}

/* Appends "field\0value\0". */
static void pair(dlock__sb *b, const char *f1, const char *f2, const char *f3,
                 const char *v) {
  dlock__sb_adds(b, f1);
  dlock__sb_adds(b, f2);
  dlock__sb_adds(b, f3);
  dlock__sb_add(b, "", 1);
  dlock__sb_adds(b, v);
  dlock__sb_add(b, "", 1);
}

/* kind:<name> for the lock objects of a kind no key shows (reg.mu held):
 * at most max; returns how many. */
static int kinds(dlock_client *c, dlock__sb *b, int max) {
  int k = 0;
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb && k < max; i++)
    for (dlock__map_ent *e = c->reg.locks.b[i]; e && k < max; e = e->next) {
      const dlock__lockent *le = e->val;
      const char *kn = dlock__lockent_ops(le)->kind_name;
      const char *v = strcmp(kn, "fair") == 0        ? "fair"
                      : strcmp(kn, "fenced") == 0    ? "fenced"
                      : strcmp(kn, "spin lock") == 0 ? "spin"
                                                     : NULL;
      if (!v)
        continue;
      pair(b, "kind:", dlock__lockent_name(le, NULL), "", v);
      k++;
    }
  return k;
}

int dlock__info_extra(dlock_client *c, dlock__sb *b) {
  char ms[24], every[24];
  dlock__fmt_i64(ms, dlock__wall_ms());
  int p = c->cfg.watchdog_timeout_ms / 3;
  dlock__fmt_i64(every, p > 0 ? p : 1);
  pair(b, "client", "", "", "blocking");
  pair(b, "checked", "", "", ms);
  pair(b, "every", "", "", every);
  int k = 3;
  int64_t now = dlock__now_ms();
  dlock__mu_lock(&c->reg.mu);
  for (dlock__note *n = c->notes; n && k < DLOCK__INFO_HOLDS_MAX; n = n->next) {
    if (!n->published && now - n->since_at < DLOCK__SINCE_AFTER_MS)
      continue;
    n->published = 1;
    char v[24], tid[24];
    dlock__fmt_i64(v, n->since_ms);
    if (n->permit) { /* permit:<id> -> "<ms>|<name>" */
      dlock__sb_adds(b, "permit:");
      dlock__sb_adds(b, n->id);
      dlock__sb_add(b, "", 1);
      dlock__sb_adds(b, v);
      dlock__sb_add(b, "|", 1);
      dlock__sb_adds(b, n->name);
      dlock__sb_add(b, "", 1);
    } else {
      dlock__fmt_i64(tid, (int64_t)n->tid);
      dlock__sb_adds(b, "wait:");
      pair(b, tid, ":", n->name, v);
    }
    k++;
  }
  k += kinds(c, b, DLOCK__INFO_HOLDS_MAX - k);
  dlock__mu_unlock(&c->reg.mu);
  return k;
}

void dlock__notes_free(dlock_client *c) {
  for (dlock__note *n = c->notes, *nx; n; n = nx) {
    nx = n->next;
    free(n);
  }
  c->notes = NULL;
}

/* ---- copies on every master (Cluster) -------------------------------------
 */

/* The master index of a slot in the client's map, or -1. */
static int owner_of(const void *map, unsigned slot) {
  const dlock__cluster *cl = map;
  int n = atomic_load(&cl->n);
  int o = atomic_load(&cl->owner[slot]);
  return o >= 0 && o < n ? o : -1;
}

void dlock__info_copies(dlock_client *c, dlock__info_send_fn *send, void *arg,
                        int argc, const char **argv, size_t *lens) {
  if (!c->cl || argc < 4)
    return;
  const char *key = argv[3];
  size_t kl = lens[3];
  char tags[DLOCK__INFO_COPIES_MAX][8];
  int n = dlock__info_copy_tags(owner_of(c->cl, dlock__key_slot(key, kl)),
                                dlock__cluster_masters(c, NULL, 0) - 1,
                                owner_of, c->cl, tags, DLOCK__INFO_COPIES_MAX);
  for (int i = 0; i < n; i++) {
    char ck[80];
    int cl_len =
        snprintf(ck, sizeof ck, "dlock_client:{%s}:%s", tags[i], c->id);
    argv[3] = ck;
    lens[3] = (size_t)cl_len;
    (void)send(c, arg, ck, argc, argv, lens);
  }
  argv[3] = key;
  lens[3] = kl;
}
