/*
 * sim_world.c -- the simulator's world: its seeded PRNG, the event queue in
 * simulated time, the trace of the last events, the scripts (the library's
 * own bodies from sim_lib_scripts.h, or a body given by
 * DLOCK_SIM_SCRIPT_<name>=<file> to put an old script back), and the
 * network: one connection per actor and one per client's watchdog, FIFO
 * within a connection, each request copy delayed, its reply lost, or the
 * copy held on the wire past the client's timeout and delivered late (as
 * tests/faultproxy's FP_HOLD does). The server is the Redis model.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "sim_lib_scripts.h"

const char *const sim_kind_name[K_COUNT] = {"mutex", "read", "write", "sem",
                                            "fair"};

/* The permit threads (and their object's renewer) and the fair lock
 * threads draw from streams of their own (sim_world.prng, .frng): the
 * other actors' draws are as before. */
sim_rng *sim_rng_of(sim_world *w, int actor) {
  if (actor >= SIM_FACTOR)
    return &w->frng;
  return actor == SIM_PW || actor >= SIM_PACTOR ? &w->prng : &w->rng;
}

static sim_rng *rng_of(sim_world *w, int actor) { return sim_rng_of(w, actor); }

sim_actor *sim_actor_at(sim_world *w, int client, int actor) {
  sim_client *cl = &w->clients[client];
  if (actor >= SIM_FACTOR)
    return &cl->factors[actor - SIM_FACTOR];
  if (actor >= SIM_PACTOR)
    return &cl->pactors[actor - SIM_PACTOR];
  if (actor == SIM_PW)
    return &cl->pw;
  return actor >= 0 ? &cl->actors[actor] : NULL;
}

/* ---- PRNG ---------------------------------------------------------------- */

uint64_t sim_rand(sim_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int64_t sim_between(sim_rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + (int64_t)(sim_rand(r) % (uint64_t)(hi - lo + 1));
}

int sim_chance(sim_rng *r, int per_mille) {
  return (int)(sim_rand(r) % 1000) < per_mille;
}

/* ---- trace -----------------------------------------------------------------
 */

void sim_trace(sim_world *w, const char *fmt, ...) {
  char *line = w->trace[w->ntrace % SIM_TRACE];
  int n = snprintf(line, SIM_TRACE_LEN, "%8.3fs  ",
                   (double)(w->now - w->t0) / 1000.0);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, (size_t)(SIM_TRACE_LEN - n), fmt, ap);
  va_end(ap);
  w->ntrace++;
  if (w->verbose)
    printf("%s\n", line);
}

void sim_trace_dump(const sim_world *w, FILE *f) {
  uint64_t from = w->ntrace > 40 ? w->ntrace - 40 : 0;
  for (uint64_t i = from; i < w->ntrace; i++)
    fprintf(f, "  %s\n", w->trace[i % SIM_TRACE]);
}

static int names_one(const char *line, const char *const *whos, int n) {
  for (int j = 0; j < n; j++) {
    const char *p = strstr(line, whos[j]);
    size_t l = strlen(whos[j]);
    if (p && (p[l] < '0' || p[l] > '9')) /* c0.t1, not c0.t12 */
      return 1;
  }
  return 0;
}

void sim_trace_story(const sim_world *w, FILE *f, const char *const *whos,
                     int n, int max) {
  uint64_t from = w->ntrace > SIM_TRACE ? w->ntrace - SIM_TRACE : 0;
  uint64_t i = w->ntrace;
  int found = 0;
  while (i > from && found < max)
    found += names_one(w->trace[--i % SIM_TRACE], whos, n);
  for (; i < w->ntrace; i++)
    if (names_one(w->trace[i % SIM_TRACE], whos, n))
      fprintf(f, "  %s\n", w->trace[i % SIM_TRACE]);
}

/* ---- the event queue (a binary heap by time, then by order of push) ----- */

static int ev_before(const sim_ev *a, const sim_ev *b) {
  return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

void sim_push(sim_world *w, const sim_ev *e) {
  if (w->nheap == w->capheap) {
    w->capheap = w->capheap ? 2 * w->capheap : 1024;
    w->heap = realloc(w->heap, w->capheap * sizeof *w->heap);
    if (!w->heap)
      abort();
  }
  size_t i = w->nheap++;
  w->heap[i] = *e;
  w->heap[i].seq = w->seq++;
  while (i > 0 && ev_before(&w->heap[i], &w->heap[(i - 1) / 2])) {
    sim_ev t = w->heap[i];
    w->heap[i] = w->heap[(i - 1) / 2];
    w->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

int sim_pop(sim_world *w, sim_ev *out) {
  if (w->nheap == 0)
    return 0;
  *out = w->heap[0];
  w->heap[0] = w->heap[--w->nheap];
  size_t i = 0, n = w->nheap;
  for (size_t depth = 0; depth < 64; depth++) { /* log2 of the heap */
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && ev_before(&w->heap[l], &w->heap[m]))
      m = l;
    if (r < n && ev_before(&w->heap[r], &w->heap[m]))
      m = r;
    if (m == i)
      break;
    sim_ev t = w->heap[i];
    w->heap[i] = w->heap[m];
    w->heap[m] = t;
    i = m;
  }
  return 1;
}

void sim_timer(sim_world *w, int client, int actor, int kind, int64_t at,
               uint64_t tag) {
  sim_ev e;
  memset(&e, 0, sizeof e);
  e.at = at;
  e.kind = kind;
  e.client = client;
  e.actor = actor;
  e.tag = tag;
  sim_push(w, &e);
}

/* ---- scripts ----------------------------------------------------------------
 */

int sim_script_count(void) { return SIM_LIB_NSCRIPTS; }

/* The body of script i: DLOCK_SIM_SCRIPT_<name>=<file> replaces it (an old
 * body put back to show the simulator finds what it fixed). */
static char *script_body(int i) {
  char env[96];
  snprintf(env, sizeof env, "DLOCK_SIM_SCRIPT_%s", sim_lib_scripts[i].name);
  const char *path = getenv(env);
  if (!path || !*path)
    return strdup(sim_lib_scripts[i].body);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "sim: %s=%s: cannot open\n", env, path);
    exit(2);
  }
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (!buf || n == 0) {
    fprintf(stderr, "sim: %s=%s: empty\n", env, path);
    exit(2);
  }
  buf[n] = '\0';
  return buf;
}

static void load_scripts(sim_world *w) {
  w->nscripts = SIM_LIB_NSCRIPTS;
  w->sname = calloc((size_t)w->nscripts, sizeof *w->sname);
  w->ssha = calloc((size_t)w->nscripts, sizeof *w->ssha);
  if (!w->sname || !w->ssha)
    abort();
  for (int i = 0; i < w->nscripts; i++) {
    char *body = script_body(i);
    const char *argv[4] = {"SCRIPT", "LOAD", body, NULL};
    rm_reply r = {0};
    if (rm_commandv(w->m, &r, argv) != RM_OK || r.type != RM_REPLY_STRING ||
        r.len != 40) {
      fprintf(stderr, "sim: SCRIPT LOAD of %s failed: %s\n",
              sim_lib_scripts[i].name, r.str ? r.str : "?");
      exit(2);
    }
    w->sname[i] = sim_lib_scripts[i].name;
    memcpy(w->ssha[i], r.str, 41);
    rm_reply_clear(&r);
    free(body);
  }
}

static const char *script_sha(const sim_world *w, const char *name) {
  for (int i = 0; i < w->nscripts; i++)
    if (strcmp(w->sname[i], name) == 0)
      return w->ssha[i];
  fprintf(stderr, "sim: no script named %s in src/\n", name);
  exit(2);
}

/* ---- the world ---------------------------------------------------------- */

static void init_keys(sim_world *w) {
  /* the semaphore and the permits, initialised (trySetPermits's effect) */
  char cap[8];
  snprintf(cap, sizeof cap, "%d", SIM_SEM_PERMITS);
  const char *init[4] = {"SET", SIM_SEM_NAME, cap, NULL};
  rm_reply r = {0};
  rm_commandv(w->m, &r, init);
  rm_reply_clear(&r);
  snprintf(cap, sizeof cap, "%d", SIM_PERM_CAP);
  init[1] = SIM_PERM_NAME;
  rm_commandv(w->m, &r, init);
  rm_reply_clear(&r);
}

static void init_actor(sim_actor *a, const sim_client *cl, int c, int idx,
                       uint64_t tid) {
  a->client = c;
  a->idx = idx;
  a->tid = tid;
  snprintf(a->field, sizeof a->field, "%s:%llu", cl->id,
           (unsigned long long)a->tid);
  a->pm.late = -1;
  a->pm.cap = -1;
  a->pm.cap_at = -1;
}

void sim_world_init(sim_world *w, uint64_t seed, int nclients, int nactors,
                    int npactors, int nfactors) {
  memset(w, 0, sizeof *w);
  w->seed = seed;
  w->rng.s = seed * 0x2545f4914f6cdd1dULL + 1;
  w->prng.s = seed * 0x9e3779b97f4a7c15ULL + 0x5eed;
  w->frng.s = seed * 0xd1b54a32d192ed03ULL + 0xfa1e;
  w->fair_stuck_since = -1;
  w->fair_excused = -1;
  const char *pb = getenv("DLOCK_SIM_PUT_BACK");
  w->put_back_late_permit = pb && strstr(pb, "permit_late_answer") != NULL;
  w->cfg.wd_lease = 3000;
  w->cfg.cto = 500;
  w->cfg.tries = 3;
  w->cfg.retry_pause = 200;
  /* dlock__tombstone_ttl: 4 x the retry policy's span, 60 s at least */
  int64_t t = (w->cfg.cto + w->cfg.retry_pause) * w->cfg.tries * 4;
  w->cfg.tomb_ttl = t < 60000 ? 60000 : t;
  w->t0 = w->now = 1700000000000LL;
  w->m = rm_new(NULL);
  rm_set_time(w->m, w->now);
  load_scripts(w);
  init_keys(w);
  /* fault rates vary per seed: some seeds calm, some stormy */
  w->p_drop = (int)sim_between(&w->rng, 0, 40);
  w->p_hold = (int)sim_between(&w->rng, 0, 40);
  w->p_slow = (int)sim_between(&w->rng, 0, 60);
  w->p_pause = (int)sim_between(&w->rng, 0, 30);
  w->nclients = nclients;
  w->clients = calloc((size_t)nclients, sizeof *w->clients);
  if (!w->clients)
    abort();
  for (int c = 0; c < nclients; c++) {
    sim_client *cl = &w->clients[c];
    snprintf(cl->id, sizeof cl->id, "%08x-0000-4000-8000-%012x", 0x5100 + c, c);
    cl->nactors = nactors;
    cl->actors = calloc((size_t)nactors, sizeof *cl->actors);
    cl->npactors = npactors;
    cl->pactors = calloc((size_t)npactors + 1, sizeof *cl->pactors);
    cl->nfactors = nfactors;
    cl->factors = calloc((size_t)nfactors + 1, sizeof *cl->factors);
    if (!cl->actors || !cl->pactors || !cl->factors)
      abort();
    cl->wd_next = -1;
    for (int i = 0; i < nactors; i++)
      init_actor(&cl->actors[i], cl, c, i, (uint64_t)(101 + i));
    for (int i = 0; i < npactors; i++)
      init_actor(&cl->pactors[i], cl, c, SIM_PACTOR + i, (uint64_t)(201 + i));
    for (int i = 0; i < nfactors; i++)
      init_actor(&cl->factors[i], cl, c, SIM_FACTOR + i, (uint64_t)(401 + i));
    init_actor(&cl->pw, cl, c, SIM_PW, 300);
  }
}

void sim_world_free(sim_world *w) {
  for (int c = 0; c < w->nclients; c++) {
    free(w->clients[c].actors);
    free(w->clients[c].pactors);
    free(w->clients[c].factors);
  }
  free(w->clients);
  free(w->heap);
  free(w->reqs);
  free(w->sname);
  free(w->ssha);
  rm_free(w->m);
}

const char *sim_who(char b[12], int actor) {
  if (actor == SIM_PW)
    return "pw";
  if (actor < 0)
    return "wd";
  if (actor >= SIM_FACTOR)
    snprintf(b, 12, "f%d", actor - SIM_FACTOR);
  else if (actor >= SIM_PACTOR)
    snprintf(b, 12, "p%d", actor - SIM_PACTOR);
  else
    snprintf(b, 12, "t%d", actor);
  return b;
}

/* ---- the network -------------------------------------------------------- */

static int req_slot(sim_world *w) {
  for (int i = 0; i < w->nreqs; i++)
    if (!w->reqs[i].used)
      return i;
  if (w->nreqs == w->capreqs) {
    w->capreqs = w->capreqs ? 2 * w->capreqs : 64;
    w->reqs = realloc(w->reqs, (size_t)w->capreqs * sizeof *w->reqs);
    if (!w->reqs)
      abort();
  }
  return w->nreqs++;
}

/* A network delay: mostly a millisecond or two, sometimes slow. */
static int64_t net_delay(sim_world *w, sim_rng *g) {
  if (sim_chance(g, w->p_slow))
    return sim_between(g, 50, 2 * w->cfg.cto);
  return sim_between(g, 0, 3);
}

void sim_send(sim_world *w, int client, int actor, const sim_call *c,
              uint64_t tag) {
  sim_client *cl = &w->clients[client];
  sim_actor *a = sim_actor_at(w, client, actor);
  sim_rng *g = rng_of(w, actor);
  int i = req_slot(w);
  sim_req *q = &w->reqs[i];
  q->call = *c;
  q->client = client;
  q->actor = actor;
  q->used = 1;
  q->tag = tag;
  q->conn = a ? a->conn : cl->wd_conn;
  q->reply_delay = net_delay(w, g);
  int64_t at = w->now + net_delay(w, g);
  int held = sim_chance(g, w->p_hold);
  q->held = held;
  q->sent_at = w->now;
  if (held) /* held on the wire past the timeout, delivered after a retry */
    at = w->now + sim_between(g, w->cfg.cto, 20000);
  else if (sim_chance(g, w->p_drop))
    q->reply_delay = -1; /* it runs; its reply is lost */
  int64_t *last = a ? &a->conn_last_deliver : &cl->wd_last_deliver;
  if (!held && at < *last)
    at = *last; /* FIFO within a connection */
  if (!held)
    *last = at;
  w->n_sent++;
  w->n_held += (uint64_t)held;
  w->n_dropped += (uint64_t)(q->reply_delay < 0);
  char d[160];
  char wb[12];
  sim_trace(w, "c%d.%s send %s%s%s", client, sim_who(wb, actor),
            sim_describe(c, d, sizeof d), held ? " [HELD on the wire]" : "",
            q->reply_delay < 0 ? " [reply will be lost]" : "");
  sim_ev e;
  memset(&e, 0, sizeof e);
  e.at = at;
  e.kind = EV_DELIVER;
  e.client = client;
  e.actor = actor;
  e.req = i;
  sim_push(w, &e);
}

static void to_rep(const rm_reply *r, sim_rep *out) {
  memset(out, 0, sizeof *out);
  out->type = r->type;
  out->integer = r->integer;
  if (r->str)
    snprintf(out->str, sizeof out->str, "%s", r->str);
}

/* Runs c on the model now. */
static void run_call(sim_world *w, const sim_call *c, rm_reply *r) {
  const char *argv[3 + 2 * SIM_MAXK];
  size_t lens[3 + 2 * SIM_MAXK];
  int n = 0;
  char nk[8];
  if (c->script) {
    argv[n++] = "EVALSHA";
    argv[n++] = script_sha(w, c->script);
    snprintf(nk, sizeof nk, "%d", c->nk);
    argv[n++] = nk;
    for (int i = 0; i < c->nk; i++)
      argv[n++] = c->k[i];
  }
  for (int i = 0; i < c->na; i++)
    argv[n++] = c->a[i];
  for (int i = 0; i < n; i++)
    lens[i] = strlen(argv[i]);
  rm_set_time(w->m, w->now);
  if (rm_command(w->m, n, argv, lens, r) != RM_OK) {
    fprintf(stderr, "sim: model error (seed %llu): %s\n",
            (unsigned long long)w->seed, rm_model_error(w->m));
    exit(2);
  }
}

void sim_deliver(sim_world *w, int i) {
  sim_req *q = &w->reqs[i];
  rm_reply r = {0};
  if ((q->actor >= SIM_PACTOR && q->actor < SIM_FACTOR) || q->actor == SIM_PW)
    sim_perm_before(w, q);
  run_call(w, &q->call, &r);
  sim_ev e;
  memset(&e, 0, sizeof e);
  to_rep(&r, &e.rep);
  rm_reply_clear(&r);
  char d[160], rs[80], late[64] = "";
  if (q->held)
    snprintf(late, sizeof late, " (LATE copy: sent %.3f s ago)",
             (double)(w->now - q->sent_at) / 1000.0);
  snprintf(rs, sizeof rs, "%s",
           e.rep.type == RM_REPLY_NIL       ? "nil"
           : e.rep.type == RM_REPLY_INTEGER ? "int"
                                            : e.rep.str);
  if (e.rep.type == RM_REPLY_INTEGER)
    snprintf(rs, sizeof rs, "%lld", e.rep.integer);
  char wb[12];
  sim_trace(w, "  server runs c%d.%s %s -> %s%s", q->client,
            sim_who(wb, q->actor), sim_describe(&q->call, d, sizeof d), rs,
            late);
  if ((q->actor >= SIM_PACTOR && q->actor < SIM_FACTOR) || q->actor == SIM_PW)
    sim_perm_ran(w, q, &e.rep);
  if (q->actor >= SIM_FACTOR && q->call.script &&
      strncmp(q->call.script, "fair_", 5) == 0 &&
      (strcmp(q->call.script, "fair_acquire") == 0 ||
       strcmp(q->call.script, "fair_try") == 0))
    sim_actor_at(w, q->client, q->actor)->acq_ran[K_FAIR] = 1;
  if (q->actor >= 0 && q->actor < SIM_PACTOR && q->call.script &&
      (strncmp(q->call.script, "acquire", 7) == 0 ||
       strncmp(q->call.script, "rw_read_acquire", 15) == 0 ||
       strncmp(q->call.script, "rw_write_acquire", 16) == 0)) {
    sim_actor *a = &w->clients[q->client].actors[q->actor];
    int kind = strncmp(q->call.script, "rw_read", 7) == 0    ? K_READ
               : strncmp(q->call.script, "rw_write", 8) == 0 ? K_WRITE
                                                             : K_MUTEX;
    a->acq_ran[kind] = 1;
  }
  if (q->reply_delay >= 0) {
    sim_client *cl = &w->clients[q->client];
    sim_actor *qa = sim_actor_at(w, q->client, q->actor);
    int64_t *last = qa ? &qa->conn_last_reply : &cl->wd_last_reply;
    e.at = w->now + q->reply_delay;
    if (e.at < *last)
      e.at = *last;
    *last = e.at;
    e.kind = EV_REPLY;
    e.client = q->client;
    e.actor = q->actor;
    e.tag = q->tag;
    sim_push(w, &e);
  }
  q->used = 0;
}

int sim_probe(sim_world *w, sim_rep *out, const char *const *argv) {
  rm_reply r = {0};
  rm_set_time(w->m, w->now);
  int rc = rm_commandv(w->m, &r, argv);
  to_rep(&r, out);
  rm_reply_clear(&r);
  return rc;
}

/* "<script> k=[...] a=[...]" shortened: client ids cut to their first 8. */
const char *sim_describe(const sim_call *c, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "%s", c->script ? c->script : "");
  for (int i = 0; i < c->na && o < n; i++) {
    const char *s = c->a[i];
    if (strlen(s) > 24)
      o += (size_t)snprintf(buf + o, n - o, " %.8s..%s", s,
                            strchr(s, ':') ? strchr(s, ':') : "");
    else
      o += (size_t)snprintf(buf + o, n - o, " %s", s);
  }
  return buf;
}
