/*
 * sim_fuzz.c -- random command sequences from recorded shapes (sim_fuzz.h):
 * the templates and their pools (holder fields, strings, numbers seen at
 * each argument of each script), the variations of a call, and the round
 * loop with its clock moves, reads and subscriptions.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_diff_int.h"
#include "sim_fuzz.h"

typedef struct tmpl {
  int argc;
  char **argv;
  size_t *lens;
  int64_t t_ms;  /* when it was recorded */
  int first_arg; /* the first argument a variation may change */
} tmpl;

typedef struct group { /* the templates of one script or command */
  char key[48];
  int *t;
  int n, cap;
} group;

typedef struct fz {
  sim_diff *d;
  const sim_fuzz_cfg *cfg;
  sim_fuzz_stats *st;
  uint64_t rng;
  tmpl *t;
  int nt, tcap;
  group *g;
  int ng;
  sim_chset fields, uuids, wids, pool, channels[2];
  const sim_trace *tr;
  size_t *seq; /* the trace's commands a window may replay, in order */
  size_t nseq;
} fz;

static uint64_t rnd(fz *f) { /* splitmix64 */
  uint64_t z = (f->rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static int below(fz *f, int n) {
  return n > 0 ? (int)(rnd(f) % (uint64_t)n) : 0;
}
static int chance(fz *f, int percent) { return below(f, 1000) < percent * 10; }

static char *dup_bytes(const char *p, size_t n) {
  char *q = malloc(n + 1);
  CHECK(q != NULL);
  memcpy(q, p, n);
  q[n] = '\0';
  return q;
}

/* ---- templates ---- */

static int hexch(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* A client id (a UUID, 8-4-4-4-12 lower-case hex) at p (n bytes left)? */
static int is_uuid(const char *p, size_t n) {
  if (n < 36)
    return 0;
  for (int i = 0; i < 36; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? p[i] != '-' : !hexch(p[i]))
      return 0;
  }
  return 1;
}

/* Collects wait ids (16 hex digits after a '|', or a whole argument) of s. */
static void scan_wids(fz *f, const char *s, size_t n) {
  for (size_t i = 0; i + 16 <= n; i++) {
    if (i > 0 && s[i - 1] != '|')
      continue;
    size_t k = 0;
    while (k < 16 && hexch(s[i + k]))
      k++;
    if (k == 16 && (i + 16 == n || s[i + 16] == '|'))
      sim_chset_add(&f->wids, s + i, 16);
  }
}

/* Collects "<uuid>:<digits>" fields and bare uuids of s. */
static void scan_fields(fz *f, const char *s, size_t n) {
  scan_wids(f, s, n);
  for (size_t i = 0; i + 36 <= n; i++) {
    if (!is_uuid(s + i, n - i))
      continue;
    sim_chset_add(&f->uuids, s + i, 36);
    size_t j = i + 36;
    if (j < n && s[j] == ':') {
      size_t k = j + 1;
      while (k < n && s[k] >= '0' && s[k] <= '9')
        k++;
      if (k > j + 1)
        sim_chset_add(&f->fields, s + i, k - i);
    }
    i += 35;
  }
}

static int group_of(fz *f, const char *key) {
  for (int i = 0; i < f->ng; i++)
    if (strcmp(f->g[i].key, key) == 0)
      return i;
  f->g = realloc(f->g, (size_t)(f->ng + 1) * sizeof *f->g);
  CHECK(f->g != NULL);
  memset(&f->g[f->ng], 0, sizeof *f->g);
  snprintf(f->g[f->ng].key, sizeof f->g[0].key, "%s", key);
  return f->ng++;
}

static int same_call(const tmpl *a, int argc, char **argv, const size_t *lens) {
  if (a->argc != argc)
    return 0;
  for (int i = 0; i < argc; i++)
    if (a->lens[i] != lens[i] || memcmp(a->argv[i], argv[i], lens[i]) != 0)
      return 0;
  return 1;
}

static void add_tmpl(fz *f, const char *gkey, int argc, char **argv,
                     const size_t *lens, int64_t t_ms, int first_arg) {
  int gi = group_of(f, gkey);
  group *g = &f->g[gi];
  if (g->n >= 96)
    return; /* enough shapes of this one */
  CHECK(g->n == 0 || f->t != NULL);
  for (int i = 0; i < g->n; i++)
    if (same_call(&f->t[g->t[i]], argc, argv, lens))
      return;
  if (f->nt == f->tcap) {
    f->tcap = f->tcap ? f->tcap * 2 : 256;
    f->t = realloc(f->t, (size_t)f->tcap * sizeof *f->t);
    CHECK(f->t != NULL);
  }
  tmpl *t = &f->t[f->nt];
  t->argc = argc;
  t->argv = malloc((size_t)argc * sizeof *t->argv);
  t->lens = malloc((size_t)argc * sizeof *t->lens);
  CHECK(t->argv && t->lens);
  for (int i = 0; i < argc; i++) {
    t->argv[i] = dup_bytes(argv[i], lens[i]);
    t->lens[i] = lens[i];
    scan_fields(f, argv[i], lens[i]);
    /* at most 64 bytes: a longer value turns the hash it lands in into a
     * hash table, whose HGETALL order is Redis's own (docs/sim.md) */
    if (i >= first_arg && lens[i] <= 64)
      sim_chset_add(&f->pool, argv[i], lens[i]);
  }
  t->t_ms = t_ms;
  t->first_arg = first_arg;
  if (g->n == g->cap) {
    g->cap = g->cap ? g->cap * 2 : 8;
    g->t = realloc(g->t, (size_t)g->cap * sizeof *g->t);
    CHECK(g->t != NULL);
  }
  g->t[g->n++] = f->nt++;
}

static void lower(const char *p, size_t n, char *out, size_t cap) {
  size_t k = n < cap - 1 ? n : cap - 1;
  for (size_t i = 0; i < k; i++)
    out[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] - 'A' + 'a' : p[i]);
  out[k] = '\0';
}

static void build_templates(fz *f, const sim_trace *tr) {
  for (size_t i = 0; i < tr->n; i++) {
    const sim_cmd *c = &tr->cmd[i];
    char name[24] = {0};
    lower(c->argv[0], c->lens[0], name, sizeof name);
    int64_t t_ms = c->t_us / 1000;
    if ((strcmp(name, "subscribe") == 0 || strcmp(name, "ssubscribe") == 0)) {
      for (int k = 1; k < c->argc; k++)
        sim_chset_add(&f->channels[name[1] == 's'], c->argv[k], c->lens[k]);
      continue;
    }
    if (strcmp(name, "eval") == 0 && c->argc >= 3) {
      char sha[41];
      sim_sha1_hex(c->argv[1], c->lens[1], sha);
      if (!sim_diff_script(f->d, sha, 40))
        sim_diff_add_script(f->d, "unnamed", c->argv[1], c->lens[1]);
      char **av = malloc((size_t)c->argc * sizeof *av);
      size_t *al = malloc((size_t)c->argc * sizeof *al);
      CHECK(av && al);
      memcpy(av, c->argv, (size_t)c->argc * sizeof *av);
      memcpy(al, c->lens, (size_t)c->argc * sizeof *al);
      char evalsha[] = "EVALSHA";
      av[0] = evalsha, al[0] = 7;
      av[1] = sha, al[1] = 40;
      add_tmpl(f, sha, c->argc, av, al, t_ms, 3);
      free(av);
      free(al);
    } else if (strcmp(name, "evalsha") == 0 && c->argc >= 3) {
      char sha[41];
      lower(c->argv[1], c->lens[1], sha, sizeof sha);
      add_tmpl(f, sha, c->argc, c->argv, c->lens, t_ms, 3);
    } else if (rm_has_command(c->argv[0], c->lens[0]) &&
               strcmp(name, "script") != 0) {
      add_tmpl(f, name, c->argc, c->argv, c->lens, t_ms, 1);
    }
  }
  f->st->templates = (unsigned long)f->nt;
  f->st->groups = (unsigned long)f->ng;
  /* the sequence windows replay: scripts, modelled commands, the
   * subscriptions that make PUBLISH reach a waiter */
  f->tr = tr;
  f->seq = malloc((tr->n ? tr->n : 1) * sizeof *f->seq);
  CHECK(f->seq != NULL);
  for (size_t i = 0; i < tr->n; i++) {
    const sim_cmd *c = &tr->cmd[i];
    char name[24] = {0};
    lower(c->argv[0], c->lens[0], name, sizeof name);
    if (strstr(name, "subscribe") ? name[0] != 'p'
                                  : rm_has_command(c->argv[0], c->lens[0]))
      f->seq[f->nseq++] = i;
  }
}

/* ---- a varied call ---- */

typedef struct call {
  int argc;
  char **argv;
  size_t *lens;
} call;

static void call_free(call *c) {
  for (int i = 0; i < c->argc; i++)
    free(c->argv[i]);
  free(c->argv);
  free(c->lens);
}

/* s with every `from` replaced by `to` (a new string in *s). */
static void replace_all(char **s, size_t *n, const char *from, size_t fl,
                        const char *to, size_t tl) {
  size_t hits = 0;
  for (size_t i = 0; i + fl <= *n; i++)
    if (memcmp(*s + i, from, fl) == 0)
      hits++, i += fl - 1;
  if (!hits)
    return;
  size_t nn = *n - hits * fl + hits * tl, o = 0;
  char *out = malloc(nn + 1);
  CHECK(out != NULL);
  for (size_t i = 0; i < *n;) {
    if (i + fl <= *n && memcmp(*s + i, from, fl) == 0) {
      memcpy(out + o, to, tl);
      o += tl, i += fl;
    } else {
      out[o++] = (*s)[i++];
    }
  }
  out[nn] = '\0';
  free(*s);
  *s = out;
  *n = nn;
}

static void replace_everywhere(call *c, int from_arg, const char *from,
                               size_t fl, const char *to, size_t tl) {
  for (int i = from_arg; i < c->argc; i++)
    replace_all(&c->argv[i], &c->lens[i], from, fl, to, tl);
}

/* The first lock name (of the configured ones) that the call mentions. */
static int name_in(fz *f, const call *c, int from_arg) {
  for (int k = 0; k < f->cfg->nnames; k++)
    for (int i = from_arg; i < c->argc; i++)
      if (c->argv[i] && memmem(c->argv[i], c->lens[i], f->cfg->names[k],
                               strlen(f->cfg->names[k])))
        return k;
  return -1;
}

static void swap_field(fz *f, call *c, int from_arg) {
  for (int i = from_arg; i < c->argc; i++)
    for (size_t k = 0; k < f->fields.n; k++) {
      const char *old = f->fields.p[k];
      if (!memmem(c->argv[i], c->lens[i], old, f->fields.len[k]))
        continue;
      size_t pick = (size_t)below(f, (int)f->fields.n);
      const char *nw = f->fields.p[pick];
      replace_everywhere(c, from_arg, old, f->fields.len[k], nw,
                         f->fields.len[pick]);
      replace_everywhere(c, from_arg, old, 36, nw, 36); /* its client id */
      return;
    }
}

/* One wait id of the call for another of the pool, everywhere. */
static void swap_wid(fz *f, call *c, int from_arg) {
  for (int i = from_arg; i < c->argc; i++)
    for (size_t k = 0; k < f->wids.n; k++) {
      if (!memmem(c->argv[i], c->lens[i], f->wids.p[k], 16))
        continue;
      size_t pick = (size_t)below(f, (int)f->wids.n);
      replace_everywhere(c, from_arg, f->wids.p[k], 16, f->wids.p[pick], 16);
      return;
    }
}

static int is_int(const char *p, size_t n, long long *v) {
  if (n == 0 || n > 18)
    return 0;
  char *end;
  char buf[24];
  memcpy(buf, p, n);
  buf[n] = '\0';
  *v = strtoll(buf, &end, 10);
  return *end == '\0' && (buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9'));
}

static void set_arg(call *c, int i, const char *p, size_t n) {
  free(c->argv[i]);
  c->argv[i] = dup_bytes(p, n);
  c->lens[i] = n;
}

static void set_num(call *c, int i, long long v) {
  char b[24];
  int n = snprintf(b, sizeof b, "%lld", v);
  set_arg(c, i, b, (size_t)n);
}

static int is_epoch(long long v) {
  return v >= 1000000000000LL && v < 100000000000000LL;
}

/* Epoch-like numbers (a client's "now", a deadline) follow the clock: as
 * far from it as they were from the recording's time t_ms. */
static void rebase_times(fz *f, call *c, int from_arg, int64_t t_ms) {
  int64_t now = sim_diff_time(f->d);
  for (int i = from_arg; i < c->argc; i++) {
    long long v;
    if (is_int(c->argv[i], c->lens[i], &v) && is_epoch(v))
      set_num(c, i, v - t_ms + now);
  }
}

/* Numbers: epoch-like ones follow the clock (with some skew); others vary
 * now and then. */
static void vary_numbers(fz *f, call *c, const tmpl *t) {
  static const long long small[] = {0, 1, 2, 3, -1, 5, 100, 1000, 30000};
  int64_t now = sim_diff_time(f->d);
  for (int i = t->first_arg; i < c->argc; i++) {
    long long v;
    if (!is_int(c->argv[i], c->lens[i], &v))
      continue;
    if (is_epoch(v)) {
      long long nv = v - t->t_ms + now;
      if (chance(f, 30))
        nv += below(f, 81) - 40;
      set_num(c, i, nv);
    } else if (i > 2 && chance(f, 12)) {
      int how = below(f, 4);
      set_num(c, i,
              how == 0   ? v + 1
              : how == 1 ? v - 1
              : how == 2 ? small[below(f, 9)]
                         : v * 2);
    }
  }
}

/* Another name for a call on names[k]: mostly one of the same class (a
 * lock's call on another lock, where kinds meet: busy, refused, -3), now
 * and then any (a lock's call on a semaphore's string: WRONGTYPE, which
 * every later lock call on that name meets too -- so not often). */
static int other_name(fz *f, int k) {
  int pick = below(f, f->cfg->nnames);
  if (!f->cfg->classes || chance(f, 10))
    return pick;
  for (int i = 0; i < f->cfg->nnames; i++) {
    int j = (pick + i) % f->cfg->nnames;
    if (f->cfg->classes[j] == f->cfg->classes[k])
      return j;
  }
  return k;
}

static call call_of(int argc, char *const *argv, const size_t *lens) {
  CHECK(argc >= 1);
  call c = {argc, calloc((size_t)argc, sizeof(char *)),
            calloc((size_t)argc, sizeof(size_t))};
  CHECK(c.argv && c.lens);
  for (int i = 0; i < argc; i++) {
    c.argv[i] = dup_bytes(argv[i], lens[i]);
    c.lens[i] = lens[i];
  }
  return c;
}

static call vary(fz *f, const tmpl *t) {
  call c = call_of(t->argc, t->argv, t->lens);
  int k = name_in(f, &c, t->first_arg);
  if (k >= 0 && chance(f, 25)) {
    const char *to = f->cfg->names[other_name(f, k)];
    replace_everywhere(&c, t->first_arg, f->cfg->names[k],
                       strlen(f->cfg->names[k]), to, strlen(to));
  }
  if (f->fields.n && chance(f, 30))
    swap_field(f, &c, t->first_arg);
  if (f->wids.n && chance(f, 15))
    swap_wid(f, &c, t->first_arg);
  vary_numbers(f, &c, t);
  if (f->pool.n && c.argc > t->first_arg && chance(f, 3)) {
    /* not an argument that names a command (the publish command): an
     * unknown command is a model error, not a difference to look for */
    int i = t->first_arg + below(f, c.argc - t->first_arg);
    size_t p = (size_t)below(f, (int)f->pool.n);
    if (!rm_has_command(c.argv[i], c.lens[i]))
      set_arg(&c, i, f->pool.p[p], f->pool.len[p]);
  }
  if (t->first_arg == 3 && c.argc > 2 && chance(f, 1)) /* numkeys +-1 */
    set_num(&c, 2, atoll(c.argv[2]) + (chance(f, 50) ? 1 : -1));
  return c;
}

/* ---- steps ---- */

/* Runs c on both sides (client `conn`); an EVALSHA answered NOSCRIPT is
 * sent again as EVAL with the body, as the library does. */
static void run_call(fz *f, int conn, call *c) {
  rm_reply r = {0};
  sim_diff_exec(f->d, conn, c->argc, (const char *const *)c->argv, c->lens, &r);
  f->st->calls++;
  sim_script *s = c->argc > 2 && c->lens[0] == 7 &&
                          strncasecmp(c->argv[0], "evalsha", 7) == 0
                      ? sim_diff_script(f->d, c->argv[1], c->lens[1])
                      : NULL;
  if (s && r.type == RM_REPLY_ERROR && strncmp(r.str, "NOSCRIPT", 8) == 0) {
    set_arg(c, 0, "EVAL", 4);
    set_arg(c, 1, s->body, s->body_len);
    sim_diff_exec(f->d, conn, c->argc, (const char *const *)c->argv, c->lens,
                  &r);
    f->st->evals++;
  }
  if (r.type == RM_REPLY_ERROR)
    f->st->errors++;
  rm_reply_clear(&r);
}

static void script_call(fz *f) {
  group *g = &f->g[below(f, f->ng)];
  const tmpl *t = &f->t[g->t[below(f, g->n)]];
  call c = vary(f, t);
  if (t->first_arg == 1)
    f->st->direct++;
  run_call(f, 0, &c);
  call_free(&c);
}

/* A window: 2 to 13 consecutive commands of the recording (a holder, a
 * waiter queuing, the subscriptions, the unlock that hands over) replayed
 * with ONE substitution for all of them -- another lock name, another
 * holder field -- and their time gaps shrunk or kept, so the states the
 * library builds come back on other names, at other moments, between the
 * random steps. */
static void window(fz *f) {
  if (!f->nseq)
    return;
  size_t start = (size_t)below(f, (int)f->nseq);
  int len = 2 + below(f, 12), k = -1, to = -1;
  const char *fold = NULL, *fnew = NULL;
  if (chance(f, 40)) { /* one name for another */
    k = below(f, f->cfg->nnames);
    to = other_name(f, k);
  }
  if (f->fields.n > 1 && chance(f, 30)) { /* one holder for another */
    fold = f->fields.p[below(f, (int)f->fields.n)];
    fnew = f->fields.p[below(f, (int)f->fields.n)];
  }
  static const int scale_pct[] = {0, 5, 25, 100};
  int pct = scale_pct[below(f, 4)];
  int64_t now0 = sim_diff_time(f->d);
  int64_t t0 = f->tr->cmd[f->seq[start]].t_us / 1000;
  for (int j = 0; j < len && start + (size_t)j < f->nseq; j++) {
    const sim_cmd *sc = &f->tr->cmd[f->seq[start + (size_t)j]];
    int64_t t = now0 + (sc->t_us / 1000 - t0) * pct / 100;
    if (t > sim_diff_time(f->d))
      sim_diff_set_time(f->d, t);
    call c = call_of(sc->argc, sc->argv, sc->lens);
    int sub = strstr(c.argv[0], "ubscribe") || strstr(c.argv[0], "UBSCRIBE");
    int from = sub                                                   ? 1
               : sim_cmd_is(sc, "eval") || sim_cmd_is(sc, "evalsha") ? 3
                                                                     : 1;
    if (sim_cmd_is(sc, "eval") && c.argc > 2) { /* as the library sends it */
      char sha[41];
      sim_sha1_hex(c.argv[1], c.lens[1], sha);
      set_arg(&c, 0, "EVALSHA", 7);
      set_arg(&c, 1, sha, 40);
    }
    if (k >= 0)
      replace_everywhere(&c, from, f->cfg->names[k], strlen(f->cfg->names[k]),
                         f->cfg->names[to], strlen(f->cfg->names[to]));
    if (fold) {
      replace_everywhere(&c, from, fold, strlen(fold), fnew, strlen(fnew));
      replace_everywhere(&c, from, fold, 36, fnew, 36);
    }
    rebase_times(f, &c, from, sc->t_us / 1000);
    if (sub) {
      sim_diff_exec(f->d, 1000 + sc->conn, c.argc, (const char *const *)c.argv,
                    c.lens, NULL);
      f->st->subscriptions++;
    } else {
      run_call(f, 0, &c);
    }
    call_free(&c);
  }
  f->st->windows++;
}

typedef struct expiring {
  int64_t at[64];
  int n;
} expiring;

static void note_expiry(void *user, const char *key, size_t klen, int type,
                        int64_t expire) {
  (void)key, (void)klen, (void)type;
  expiring *e = user;
  if (expire >= 0 && e->n < 64)
    e->at[e->n++] = expire;
}

static void clock_move(fz *f) {
  int64_t now = sim_diff_time(f->d), to = now;
  int how = below(f, 100);
  if (how < 12) {
    expiring e = {{0}, 0};
    rm_foreach_key(sim_diff_model(f->d), note_expiry, &e);
    if (e.n) {
      to = e.at[below(f, e.n)] + (chance(f, 50) ? 0 : 1);
      f->st->at_expiry++;
    }
  } else if (how < 50) {
    to = now + below(f, 4);
  } else if (how < 78) {
    to = now + 4 + below(f, 27);
  } else if (how < 94) {
    to = now + below(f, 1001);
  } else {
    to = now + 10000 + below(f, 50001);
  }
  /* never back: Redis's background expiry may or may not have deleted a
   * key the clock had passed (its cron's timing), the model has (see
   * rm_keyspace.c): no deterministic comparison */
  sim_diff_set_time(f->d, to);
  f->st->clock_moves++;
}

typedef struct key_pick {
  fz *f;
  int want, seen;
  char k[256];
  size_t kl;
} key_pick;

static void pick_key(void *user, const char *key, size_t klen, int type,
                     int64_t expire) {
  (void)type, (void)expire;
  key_pick *p = user;
  if (p->seen++ == p->want && klen < sizeof p->k) {
    memcpy(p->k, key, klen);
    p->kl = klen;
  }
}

static void observe(fz *f) {
  key_pick p = {f, 0, 0, {0}, 0};
  rm_model *m = sim_diff_model(f->d);
  size_t n = rm_dbsize(m);
  if (n && chance(f, 85)) {
    p.want = below(f, (int)n);
    rm_foreach_key(m, pick_key, &p);
  } else if (f->pool.n) {
    size_t i = (size_t)below(f, (int)f->pool.n);
    if (f->pool.len[i] < sizeof p.k) {
      memcpy(p.k, f->pool.p[i], f->pool.len[i]);
      p.kl = f->pool.len[i];
    }
  }
  static const char *const reads[][5] = {
      {"TYPE", NULL},        {"PTTL", NULL},
      {"GET", NULL},         {"HGETALL", NULL},
      {"LRANGE", "0", "-1"}, {"ZRANGE", "0", "-1", "WITHSCORES"},
      {"HLEN", NULL},        {"ZCARD", NULL},
      {"LLEN", NULL},        {"EXISTS", NULL}};
  const char *const *r = reads[below(f, 10)];
  const char *av[6] = {r[0], p.k};
  size_t al[6] = {strlen(r[0]), p.kl};
  int argc = 2;
  for (int i = 1; i < 4 && r[i]; i++, argc++) {
    av[argc] = r[i];
    al[argc] = strlen(r[i]);
  }
  sim_diff_exec(f->d, 0, argc, av, al, NULL);
  f->st->observes++;
}

static void subscription(fz *f) {
  int id = 900 + below(f, 3);
  size_t pooled = f->channels[0].n + f->channels[1].n;
  size_t total = pooled + sim_diff_nchannels(f->d);
  if (!total)
    return;
  /* half the time a channel the scripts published on: receivers count */
  size_t npub = total - pooled;
  size_t i = npub && (chance(f, 50) || !pooled)
                 ? pooled + (size_t)below(f, (int)npub)
                 : (size_t)below(f, (int)pooled),
         len;
  int sharded;
  const char *ch;
  if (i < pooled) {
    sharded = i >= f->channels[0].n;
    size_t k = sharded ? i - f->channels[0].n : i;
    ch = f->channels[sharded].p[k];
    len = f->channels[sharded].len[k];
  } else {
    ch = sim_diff_channel(f->d, i - pooled, &len, &sharded);
  }
  /* mostly subscribe, else unsubscribe that channel, now and then all */
  int how = below(f, 20), sub = how < 14, all = how == 19;
  const char *verb = sub ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                         : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
  char *chc = dup_bytes(ch, len); /* the pool may grow meanwhile */
  const char *av[2] = {verb, chc};
  size_t al[2] = {strlen(verb), len};
  sim_diff_exec(f->d, id, all ? 1 : 2, av, al, NULL);
  free(chc);
  f->st->subscriptions++;
}

static void round_run(fz *f, int round) {
  int flush = chance(f, 30);
  sim_diff_reset(f->d, flush);
  f->st->script_flushes += (unsigned long)flush;
  for (int s = 0; s < f->cfg->steps; s++) {
    sim_diff_context(f->d,
                     "random phase: seed %llu, round %d of %d, step %d of %d",
                     (unsigned long long)f->cfg->seed, round + 1,
                     f->cfg->rounds, s + 1, f->cfg->steps);
    int a = below(f, 100);
    if (a < 52)
      script_call(f);
    else if (a < 60)
      window(f);
    else if (a < 78)
      clock_move(f);
    else if (a < 92)
      observe(f);
    else if (a < 98)
      subscription(f);
    else
      sim_diff_check_keyspace(f->d);
  }
  sim_diff_check_keyspace(f->d);
}

void sim_fuzz_run(sim_diff *d, const sim_trace *trace, const sim_fuzz_cfg *cfg,
                  sim_fuzz_stats *st) {
  memset(st, 0, sizeof *st);
  fz f;
  memset(&f, 0, sizeof f);
  f.d = d, f.cfg = cfg, f.st = st, f.rng = cfg->seed;
  build_templates(&f, trace);
  CHECK_MSG(f.ng > 0, "no templates in the trace");
  for (int r = 0; r < cfg->rounds; r++) {
    if (r >= cfg->min_rounds && cfg->stop_at_ms > 0 &&
        th_now_ms() >= cfg->stop_at_ms)
      break;
    round_run(&f, r);
    st->rounds++;
  }
  for (int i = 0; i < f.nt; i++) {
    call c = {f.t[i].argc, f.t[i].argv, f.t[i].lens};
    call_free(&c);
  }
  for (int i = 0; i < f.ng; i++)
    free(f.g[i].t);
  free(f.t);
  free(f.g);
  sim_chset_free(&f.fields);
  sim_chset_free(&f.uuids);
  sim_chset_free(&f.wids);
  free(f.seq);
  sim_chset_free(&f.pool);
  sim_chset_free(&f.channels[0]);
  sim_chset_free(&f.channels[1]);
}
