/*
 * lockwho.c -- who holds and who waits (lockscan.h): the info keys of the
 * clients a scan found (dlock_client:{<uuid>}, docs/design.md), read on the
 * master of each key's slot, one pipeline per master, and what they say put
 * on the locks: each holder's and waiter's host, pid, program and last
 * check-in, when a hold began (since:<tid>:<name>) and a wait
 * (wait:<tid>:<name>, for the waits no queue dates), who took each permit
 * (permit:<id>), the waits no queue holds (a spin lock's, a semaphore's),
 * and the kind of a fair, fenced or spin lock no key shows (kind:<name>).
 * And ls_read: one lock, for `dlock status`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "lockscan_int.h"

/* One client's info key. */
typedef struct client {
  char id[LS_UUID_LEN + 1];
  char node[300];
  char key[160];     /* its info key, or a copy of it on node */
  dlock_reply *info; /* HGETALL's reply; NULL: not read */
  int pending;       /* to be read in this round */
} client;

typedef struct clients {
  client *v;
  size_t n;
} clients;

/* The value of field f in a flat [k, v, ...] reply, or NULL. */
static const char *field_of(const dlock_reply *h, const char *f) {
  for (size_t i = 0; i + 1 < r_n(h); i += 2)
    if (r_str(h->element[i]) && strcmp(h->element[i]->str, f) == 0)
      return r_str(h->element[i + 1]);
  return NULL;
}

static client *client_of(const clients *cs, const char *owner) {
  if (strlen(owner) < LS_UUID_LEN)
    return NULL;
  for (size_t i = 0; i < cs->n; i++)
    if (strncasecmp(cs->v[i].id, owner, LS_UUID_LEN) == 0)
      return cs->v[i].info && r_n(cs->v[i].info) ? &cs->v[i] : NULL;
  return NULL;
}

/* who from c's info key (NULL: unknown). */
static void who_of(const client *c, ls_who *w) {
  memset(w, 0, sizeof *w);
  if (!c)
    return;
  const dlock_reply *h = c->info;
  const char *v;
  w->known = 1;
  snprintf(w->client, sizeof w->client, "%s", c->id);
  if ((v = field_of(h, "host")))
    snprintf(w->host, sizeof w->host, "%s", v);
  if ((v = field_of(h, "program")))
    snprintf(w->program, sizeof w->program, "%s", v);
  if ((v = field_of(h, "pid")))
    w->pid = strtoll(v, NULL, 10);
  if ((v = field_of(h, "checked")))
    w->checked_ms = strtoll(v, NULL, 10);
  if ((v = field_of(h, "client")))
    snprintf(w->kind, sizeof w->kind, "%s", v);
  if ((v = field_of(h, "conn_name")))
    snprintf(w->name, sizeof w->name, "%s", v);
}

/* "<prefix><tid>:<name>" of owner "<uuid>:<tid>" into buf. */
static const char *per_thread(char *buf, size_t n, const char *prefix,
                              const char *owner, const char *name) {
  const char *tid = strlen(owner) > LS_UUID_LEN ? owner + LS_UUID_LEN + 1 : "";
  snprintf(buf, n, "%s%s:%s", prefix, tid, name);
  return buf;
}

/* ---- reading the info keys
 * --------------------------------------------------- */

/* The ids to read: seen, those of the copies seen, those the locks name. */
static int collect(const ls_result *r, const strset *seen, const strset *copies,
                   strset *ids) {
  for (size_t i = 0; i < seen->n; i++)
    if (set_add(ids, seen->v[i], strlen(seen->v[i])) != 0)
      return -1;
  for (size_t i = 0; copies && i < copies->n; i++)
    if (strlen(copies->v[i]) > LS_UUID_LEN &&
        set_add(ids, copies->v[i], LS_UUID_LEN) != 0)
      return -1;
  for (size_t i = 0; i < r->n; i++) {
    const ls_lock *l = &r->locks[i];
    for (size_t j = 0; j < l->nholders; j++)
      if (strcmp(l->holders[j].mode, "permit") != 0 &&
          strlen(l->holders[j].owner) > LS_UUID_LEN &&
          set_add(ids, l->holders[j].owner, LS_UUID_LEN) != 0)
        return -1;
    for (size_t j = 0; j < l->nwaiters; j++)
      if (strlen(l->waiters[j].owner) > LS_UUID_LEN &&
          set_add(ids, l->waiters[j].owner, LS_UUID_LEN) != 0)
        return -1;
  }
  return 0;
}

static int failed_node(const ls_result *r, const char *node) {
  for (size_t i = 0; i < r->nerrors; i++)
    if (strcmp(r->errors[i].node, node) == 0)
      return 1;
  return 0;
}

/* HGETALL of the info keys on node, in chunks; a failure of the master
 * goes to r->errors. */
static void read_node(dlock_admin *a, const ls_opts *o, long long t0,
                      ls_result *r, clients *cs, const char *node) {
  enum { CHUNK = 500 };
  nscan s = {.a = a, .o = o, .node = node, .t0 = t0};
  size_t idx[CHUNK];
  for (size_t i = 0; i < cs->n && !s.failed;) {
    pipe p = {0};
    size_t k = 0;
    for (; i < cs->n && k < CHUNK; i++)
      if (cs->v[i].pending && strcmp(cs->v[i].node, node) == 0) {
        const char *av[] = {"HGETALL", cs->v[i].key};
        pipe_add(&p, 2, av);
        cs->v[i].pending = 0;
        idx[k++] = i;
      }
    dlock_reply *rs[CHUNK] = {0};
    if (k && ls_run(&s, &p, rs) == 0)
      for (size_t j = 0; j < k; j++) {
        dlock_reply_free(cs->v[idx[j]].info);
        cs->v[idx[j]].info = rs[j];
        rs[j] = NULL;
      }
    pipe_free(&p);
  }
  r->commands += s.commands;
  if (s.failed)
    ls_add_error(r, node, s.code, s.why);
}

/* The round's pending reads, one pipeline per master. */
static void read_round(dlock_admin *a, const ls_opts *o, long long t0,
                       ls_result *r, clients *cs) {
  strset nodes = {0};
  for (size_t i = 0; i < cs->n; i++)
    if (cs->v[i].pending)
      (void)set_add(&nodes, cs->v[i].node, strlen(cs->v[i].node));
  for (size_t i = 0; i < nodes.n; i++)
    read_node(a, o, t0, r, cs, nodes.v[i]);
  set_free(&nodes);
}

/* The copy a Cluster client wrote on a master that answers, found as it
 * chose it (clientnotes.c: for each master, the first tag "%x" whose slot
 * it owns): the first tag whose master is not a failed one. 1 if found. */
static int copy_by_rule(dlock_admin *a, client *c, const ls_result *r) {
  int others = 0;
  for (unsigned t = 0; t < 4096 && (others || t < 64); t++) {
    char key[96], node[300];
    snprintf(key, sizeof key, "dlock_client:{%x}:%s", t, c->id);
    if (dlock_admin_node_of(a, key, node, sizeof node) != 0 ||
        strcmp(node, c->node) == 0)
      continue; /* one master only (standalone, Sentinel): no copies */
    others = 1;
    if (failed_node(r, node))
      continue;
    snprintf(c->node, sizeof c->node, "%s", node);
    snprintf(c->key, sizeof c->key, "%s", key);
    c->pending = 1;
    return 1;
  }
  return 0;
}

/* A copy of c's info key on a master that answers ("<id>\t<node>\t<key>"
 * of copies, as a scan saw it, else as the writer chose it): c then reads
 * it in the next round. 1 if there is one. */
static int use_copy(dlock_admin *a, client *c, const strset *copies,
                    const ls_result *r) {
  for (size_t i = 0; copies && i < copies->n; i++) {
    const char *e = copies->v[i], *t1 = strchr(e, '\t');
    const char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t2 || strncasecmp(e, c->id, LS_UUID_LEN) != 0)
      continue;
    char node[300];
    copy_n(node, sizeof node, t1 + 1, (size_t)(t2 - t1 - 1));
    if (failed_node(r, node))
      continue;
    snprintf(c->node, sizeof c->node, "%s", node);
    snprintf(c->key, sizeof c->key, "%s", t2 + 1);
    c->pending = 1;
    return 1;
  }
  /* its master failed, or the slot map has none for it (the cluster
   * dropped a failed master's slots) */
  return (!c->node[0] || failed_node(r, c->node)) && copy_by_rule(a, c, r);
}

/* Reads every id's info key on its master; one whose master failed, from
 * a copy on another master (a Cluster client writes one on each). */
static int read_all(dlock_admin *a, const ls_opts *o, long long t0,
                    ls_result *r, const strset *ids, const strset *copies,
                    clients *cs) {
  cs->v = calloc(ids->n + 1, sizeof *cs->v);
  if (!cs->v)
    return -1;
  for (size_t i = 0; i < ids->n; i++) {
    client *c = &cs->v[cs->n++];
    snprintf(c->id, sizeof c->id, "%s", ids->v[i]);
    snprintf(c->key, sizeof c->key, "dlock_client:{%s}", c->id);
    c->pending = dlock_admin_node_of(a, c->key, c->node, sizeof c->node) == 0 &&
                 !failed_node(r, c->node);
  }
  read_round(a, o, t0, r, cs);
  int again = 0;
  for (size_t i = 0; i < cs->n; i++)
    if (!cs->v[i].info || !r_n(cs->v[i].info))
      again |= use_copy(a, &cs->v[i], copies, r);
  if (again)
    read_round(a, o, t0, r, cs);
  return 0;
}

/* ---- what the info keys say
 * -------------------------------------------------- */

/* The client whose info key lists permit id: its since into *since. */
static client *permit_owner(const clients *cs, const char *id,
                            long long *since) {
  char f[64];
  snprintf(f, sizeof f, "permit:%s", id);
  for (size_t i = 0; i < cs->n; i++) {
    const char *v = cs->v[i].info ? field_of(cs->v[i].info, f) : NULL;
    if (v) {
      *since = strtoll(v, NULL, 10);
      return &cs->v[i];
    }
  }
  return NULL;
}

static void name_holders(ls_lock *l, const clients *cs) {
  char f[1200];
  for (size_t j = 0; j < l->nholders; j++) {
    ls_holder *h = &l->holders[j];
    client *c;
    if (strcmp(h->mode, "permit") == 0) {
      c = permit_owner(cs, h->owner, &h->since_ms);
    } else {
      c = client_of(cs, h->owner);
      const char *v =
          c ? field_of(c->info,
                       per_thread(f, sizeof f, "since:", h->owner, l->name))
            : NULL;
      h->since_ms = v ? strtoll(v, NULL, 10) : 0;
      /* a fair, fenced or spin lock no key marks: its holder's kind: */
      const char *k =
          c ? field_of(c->info, (snprintf(f, sizeof f, "kind:%s", l->name), f))
            : NULL;
      if (k && strcmp(l->kind, "mutex") == 0)
        l->kind = strcmp(k, "fair") == 0     ? "fair"
                  : strcmp(k, "fenced") == 0 ? "fenced"
                  : strcmp(k, "spin") == 0   ? "spin"
                                             : l->kind;
    }
    h->alive = c != NULL;
    who_of(c, &h->who);
  }
}

static void name_waiters(ls_lock *l, const clients *cs) {
  char f[1200];
  for (size_t j = 0; j < l->nwaiters; j++) {
    ls_waiter *w = &l->waiters[j];
    client *c = client_of(cs, w->owner);
    w->alive = c != NULL;
    who_of(c, &w->who);
    const char *v =
        c && !w->since_ms
            ? field_of(c->info,
                       per_thread(f, sizeof f, "wait:", w->owner, l->name))
            : NULL;
    if (v)
      w->since_ms = strtoll(v, NULL, 10);
  }
}

static int by_name(const void *k, const void *e) {
  return strcmp(k, ((const ls_lock *)e)->name);
}

/* The waits of client c that no queue holds (wait:<tid>:<name> of a lock
 * of r with no waiter of that owner): added as queue "none". */
static void extra_waits(ls_result *r, client *c) {
  const dlock_reply *h = c->info;
  for (size_t i = 0; i + 1 < r_n(h); i += 2) {
    const char *f = r_str(h->element[i]);
    if (!f || strncmp(f, "wait:", 5) != 0)
      continue;
    const char *tid = f + 5, *colon = strchr(tid, ':');
    if (!colon)
      continue;
    ls_lock *l = bsearch(colon + 1, r->locks, r->n, sizeof *r->locks, by_name);
    if (!l)
      continue;
    char owner[96];
    snprintf(owner, sizeof owner, "%s:%.*s", c->id, (int)(colon - tid), tid);
    int have = 0;
    for (size_t j = 0; j < l->nwaiters && !have; j++)
      have = strcmp(l->waiters[j].owner, owner) == 0;
    ls_waiter *v =
        have ? NULL : realloc(l->waiters, (l->nwaiters + 1) * sizeof *v);
    if (!v)
      continue;
    l->waiters = v;
    ls_waiter *w = &v[l->nwaiters++];
    memset(w, 0, sizeof *w);
    snprintf(w->owner, sizeof w->owner, "%s", owner);
    w->queue = "none";
    w->since_ms = strtoll(
        r_str(h->element[i + 1]) ? h->element[i + 1]->str : "0", NULL, 10);
    w->alive = 1;
    who_of(c, &w->who);
  }
}

void ls_name_all(dlock_admin *a, const ls_opts *o, long long t0, ls_result *r,
                 const strset *seen, const strset *copies) {
  strset ids = {0};
  clients cs = {0};
  if (collect(r, seen, copies, &ids) == 0 &&
      read_all(a, o, t0, r, &ids, copies, &cs) == 0) {
    for (size_t i = 0; i < cs.n; i++)
      if (cs.v[i].info && r_n(cs.v[i].info))
        extra_waits(r, &cs.v[i]);
    for (size_t i = 0; i < r->n; i++) {
      name_holders(&r->locks[i], &cs);
      name_waiters(&r->locks[i], &cs);
    }
  }
  for (size_t i = 0; i < cs.n; i++)
    dlock_reply_free(cs.v[i].info);
  free(cs.v);
  set_free(&ids);
}

/* ---- one lock
 * ------------------------------------------------------------------ */

/* The TYPE of name on s's master: 'h', 's' or 0 (none, another type, a
 * hash too big to be a lock). 0 or -1. */
static int type_of(nscan *s, const char *name, char *t) {
  pipe p = {0};
  const char *a1[] = {"TYPE", name}, *a2[] = {"HLEN", name};
  pipe_add(&p, 2, a1);
  pipe_add(&p, 2, a2);
  dlock_reply *r[2] = {0};
  int rc = ls_run(s, &p, r);
  pipe_free(&p);
  const char *ty = rc ? NULL : r_str(r[0]);
  *t = (char)(!ty                                             ? 0
              : strcmp(ty, "hash") == 0 && r_int(r[1]) <= 512 ? 'h'
              : strcmp(ty, "string") == 0                     ? 's'
                                                              : 0);
  ls_replies_free(r, rc ? 0 : 2);
  return rc;
}

int ls_read(dlock_admin *a, const char *name, const ls_opts *o, ls_lock *out,
            char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char node[300];
  int rc = dlock_admin_node_of(a, name, node, sizeof node);
  if (rc) {
    snprintf(err, errlen, "%s", dlock_last_error());
    return ls_exit_code(rc, err);
  }
  long long t0 = dlc_now_ms();
  nscan s = {.a = a, .o = o, .pattern = "*", .node = node, .t0 = t0};
  char t = 0;
  if (type_of(&s, name, &t) == 0 && t)
    (void)ls_read_one(&s, name, t, 1);
  if (s.failed) {
    snprintf(err, errlen, "%s: %s", node, s.why);
    free(s.locks);
    return s.code;
  }
  if (s.n == 0) {
    free(s.locks);
    return 0; /* no lock of that name */
  }
  ls_result r = {.locks = s.locks, .n = 1};
  strset seen = {0}, copies = {0};
  /* who took a permit, who waits for a semaphore: only the clients' info
   * keys say, and only a scan finds those */
  if (strcmp(s.locks[0].kind, "permits") == 0 || s.locks[0].subscribers > 0) {
    char e2[256];
    if (ls_list_nodes(a, &r, e2, sizeof e2) == 0) {
      nscan *ss = calloc(r.nnodes + 1, sizeof *ss);
      for (size_t i = 0; ss && i < r.nnodes; i++)
        ss[i] = (nscan){.a = a, .o = o, .node = r.nodes[i], .t0 = t0};
      if (ss)
        ls_run_all(ss, &r, ls_info_thread);
      if (ss)
        (void)ls_merge(&r, ss, &seen, &copies);
      free(ss);
    }
  }
  ls_name_all(a, o, t0, &r, &seen, &copies);
  set_free(&seen);
  set_free(&copies);
  *out = r.locks[0];
  free(r.locks);
  dlock_admin_nodes_free(r.nodes, r.nnodes);
  free(r.node_ok);
  free(r.errors);
  return 0;
}
