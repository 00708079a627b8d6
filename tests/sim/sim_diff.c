/*
 * sim_diff.c -- the Redis model against a real redis-server in lockstep
 * (sim_diff.h): the frozen-clock server, commands to both sides, replies
 * compared, the keyspaces compared, and a failure's report.
 */
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_diff_int.h"

void sim_sha1_hex(const char *p, size_t n, char out[41]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int ml = 0;
  if (!EVP_Digest(p, n, md, &ml, EVP_sha1(), NULL) || ml != 20)
    th_fail(__FILE__, __LINE__, "SHA1 failed");
  for (size_t i = 0; i < 20; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* ---- the clock ---- */

static void shim_write(int fd, int64_t ms) {
  char b[48];
  int n =
      snprintf(b, sizeof b, "=%019lld/%019lld\n", (long long)ms, (long long)ms);
  CHECK(n == 41 && pwrite(fd, b, 41, 0) == 41);
}

void sim_diff_set_time(sim_diff *d, int64_t ms) {
  if (ms == d->now)
    return;
  shim_write(d->shim_fd, ms);
  rm_set_time(d->m, ms);
  d->now = ms;
}

int64_t sim_diff_time(const sim_diff *d) { return d->now; }

sim_diff *sim_diff_new(const char *clockshim, int64_t start_ms) {
  sim_diff *d = calloc(1, sizeof *d);
  CHECK(d != NULL);
  const char *file = th_tmpfile("sim-clock");
  d->shim_fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK(d->shim_fd >= 0);
  d->now = start_ms;
  shim_write(d->shim_fd, start_ms);
  setenv("LD_PRELOAD", clockshim, 1);
  setenv("DLOCK_CLOCKSHIM_FILE", file, 1);
  d->r = th_redis_new(0, NULL);
  unsetenv("LD_PRELOAD");
  unsetenv("DLOCK_CLOCKSHIM_FILE");
  CHECK_MSG(th_server_ms(d->r) == start_ms,
            "the clock shim did not freeze the server's clock (TIME %lld, "
            "set %lld)",
            th_server_ms(d->r), (long long)start_ms);
  d->cmd = th_redis_raw(d->r);
  rm_pubsub ps = {sim_subs_publish, sim_subs_numsub, d};
  d->m = rm_new(&ps);
  rm_set_time(d->m, start_ms);
  return d;
}

void sim_diff_free(sim_diff *d) {
  if (!d)
    return;
  sim_subs_free(d);
  redisFree(d->cmd);
  rm_free(d->m);
  for (size_t i = 0; i < d->nscripts; i++) {
    free(d->scripts[i].name);
    free(d->scripts[i].body);
  }
  free(d->scripts);
  sim_chset_free(&d->published[0]);
  sim_chset_free(&d->published[1]);
  close(d->shim_fd);
  free(d);
}

void sim_diff_context(sim_diff *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->ctx, sizeof d->ctx, fmt, ap);
  va_end(ap);
}

rm_model *sim_diff_model(sim_diff *d) { return d->m; }

void sim_diff_stats_get(const sim_diff *d, sim_diff_stats *st) { *st = d->st; }

void sim_diff_skipped_names(const sim_diff *d, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->nskips && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s %lu", i ? ", " : "",
                           d->skips[i].name, d->skips[i].n);
}

size_t sim_diff_nchannels(const sim_diff *d) {
  return d->published[0].n + d->published[1].n;
}

const char *sim_diff_channel(const sim_diff *d, size_t i, size_t *len,
                             int *sharded) {
  *sharded = i >= d->published[0].n;
  const sim_chset *s = &d->published[*sharded];
  size_t k = *sharded ? i - d->published[0].n : i;
  *len = s->len[k];
  return s->p[k];
}

/* ---- scripts ---- */

void sim_diff_add_script(sim_diff *d, const char *name, const char *body,
                         size_t len) {
  char sha[41];
  sim_sha1_hex(body, len, sha);
  if (sim_diff_script(d, sha, 40))
    return;
  if (d->nscripts == d->scap) {
    d->scap = d->scap ? d->scap * 2 : 64;
    d->scripts = realloc(d->scripts, d->scap * sizeof *d->scripts);
    CHECK(d->scripts != NULL);
  }
  sim_script *s = &d->scripts[d->nscripts++];
  memset(s, 0, sizeof *s);
  s->name = strdup(name);
  memcpy(s->sha, sha, 41);
  s->body = malloc(len + 1);
  CHECK(s->name && s->body);
  memcpy(s->body, body, len);
  s->body[len] = '\0';
  s->body_len = len;
}

sim_script *sim_diff_script(sim_diff *d, const char *sha, size_t len) {
  if (len != 40)
    return NULL;
  for (size_t i = 0; i < d->nscripts; i++)
    if (strncasecmp(d->scripts[i].sha, sha, 40) == 0)
      return &d->scripts[i];
  return NULL;
}

size_t sim_diff_nscripts(const sim_diff *d) { return d->nscripts; }
sim_script *sim_diff_script_at(sim_diff *d, size_t i) { return &d->scripts[i]; }

/* ---- printing ---- */

void sim_escape(const char *p, size_t n, size_t max, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < n && i < max && o + 5 < len; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '"')
      buf[o++] = (char)ch;
    else
      o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
  }
  if (n > max && o + 24 < len)
    o += (size_t)snprintf(buf + o, len - o, "...(%zu bytes)", n);
  buf[o < len ? o : len - 1] = '\0';
}

static sim_script *script_of_call(sim_diff *d, int argc,
                                  const char *const *argv, const size_t *lens) {
  if (argc < 2)
    return NULL;
  if (lens[0] == 7 && strncasecmp(argv[0], "evalsha", 7) == 0)
    return sim_diff_script(d, argv[1], lens[1]);
  if (lens[0] == 4 && strncasecmp(argv[0], "eval", 4) == 0) {
    char sha[41];
    sim_sha1_hex(argv[1], lens[1], sha);
    return sim_diff_script(d, sha, 40);
  }
  return NULL;
}

void sim_describe_call(sim_diff *d, int argc, const char *const *argv,
                       const size_t *lens, char *buf, size_t len) {
  size_t at = 0;
  char e[400];
  sim_script *s = script_of_call(d, argc, argv, lens);
  int first_arg = 1, nkeys = 0;
  at += (size_t)snprintf(buf + at, len - at, "%.*s", (int)lens[0], argv[0]);
  if (argc >= 3 &&
      (s || (lens[0] >= 4 && strncasecmp(argv[0], "eval", 4) == 0))) {
    nkeys = atoi(argv[2]);
    at += (size_t)snprintf(buf + at, len - at, " (script '%s' %s)",
                           s ? s->name : "?", s ? s->sha : "?");
    first_arg = 3;
  }
  for (int i = first_arg; i < argc && at + 8 < len; i++) {
    sim_escape(argv[i], lens[i], 120, e, sizeof e);
    const char *tag = "";
    if (first_arg == 3)
      tag = i == 3 ? " keys [" : i == 3 + nkeys ? "] args [" : ", ";
    else
      tag = " ";
    at += (size_t)snprintf(buf + at, len - at, "%s%s", tag, e);
  }
  if (first_arg == 3 && at + 2 < len)
    snprintf(buf + at, len - at, "%s]", argc == 3 ? " keys [" : "");
}

static void repr(const rm_reply *r, char *buf, size_t len, int depth) {
  char e[400];
  switch (r->type) {
  case RM_REPLY_STRING:
    sim_escape(r->str, r->len, 160, e, sizeof e);
    snprintf(buf, len, "\"%s\"", e);
    return;
  case RM_REPLY_STATUS:
    sim_escape(r->str, r->len, 160, e, sizeof e);
    snprintf(buf, len, "+%s", e);
    return;
  case RM_REPLY_ERROR:
    sim_escape(r->str, r->len, 300, e, sizeof e);
    snprintf(buf, len, "-%s", e);
    return;
  case RM_REPLY_INTEGER:
    snprintf(buf, len, ":%lld", r->integer);
    return;
  case RM_REPLY_NIL:
    snprintf(buf, len, "(nil)");
    return;
  default:
    break;
  }
  size_t at = (size_t)snprintf(buf, len, "[");
  for (size_t i = 0; i < r->elements && at + 16 < len && depth < 6; i++) {
    if (i)
      at += (size_t)snprintf(buf + at, len - at, ", ");
    repr(&r->element[i], buf + at, len - at, depth + 1);
    at += strlen(buf + at);
  }
  if (at + 2 < len)
    snprintf(buf + at, len - at, "]");
}

void sim_fail(sim_diff *d, const char *what, const char *detail) {
  fprintf(stderr,
          "\nTHE REDIS MODEL DIFFERS FROM redis-server at step %lu "
          "(simulated time %lld ms):\n  %s\n%s\n  context: %s\n"
          "  the steps before it (oldest first):\n",
          d->step, (long long)d->now, what, detail, d->ctx);
  for (int i = 0; i < 6; i++) {
    const char *s = d->recent[(d->step + (unsigned long)i) % 6];
    if (s[0])
      fprintf(stderr, "    %s\n", s);
  }
  th_fail(__FILE__, __LINE__, "the Redis model differs from redis-server: %s",
          what);
}

/* ---- replies ---- */

static void from_hiredis(rm_reply *dst, const redisReply *r) {
  memset(dst, 0, sizeof *dst);
  dst->type = r->type;
  switch (r->type) {
  case REDIS_REPLY_STRING:
  case REDIS_REPLY_STATUS:
  case REDIS_REPLY_ERROR:
    dst->str = malloc(r->len + 1);
    CHECK(dst->str != NULL);
    memcpy(dst->str, r->str, r->len);
    dst->str[r->len] = '\0';
    dst->len = r->len;
    break;
  case REDIS_REPLY_INTEGER:
    dst->integer = r->integer;
    break;
  case REDIS_REPLY_ARRAY:
    dst->elements = r->elements;
    dst->element = calloc(r->elements ? r->elements : 1, sizeof *dst->element);
    CHECK(dst->element != NULL);
    for (size_t i = 0; i < r->elements; i++)
      from_hiredis(&dst->element[i], r->element[i]);
    break;
  case REDIS_REPLY_NIL:
    break;
  default:
    th_fail(__FILE__, __LINE__, "redis-server sent a RESP3 reply type %d",
            r->type);
  }
}

/* 1 when equal; else *path says where they part. */
static int same(const rm_reply *a, const rm_reply *b, char *path, size_t len) {
  if (a->type != b->type) {
    snprintf(path, len, "type %d vs %d", a->type, b->type);
    return 0;
  }
  if (a->type == RM_REPLY_INTEGER && a->integer != b->integer) {
    snprintf(path, len, "integer");
    return 0;
  }
  if ((a->type == RM_REPLY_STRING || a->type == RM_REPLY_STATUS ||
       a->type == RM_REPLY_ERROR) &&
      (a->len != b->len || memcmp(a->str, b->str, a->len) != 0)) {
    snprintf(path, len, "text");
    return 0;
  }
  if (a->type != RM_REPLY_ARRAY)
    return 1;
  if (a->elements != b->elements) {
    snprintf(path, len, "array length %zu vs %zu", a->elements, b->elements);
    return 0;
  }
  for (size_t i = 0; i < a->elements; i++) {
    size_t at = (size_t)snprintf(path, len, "element %zu: ", i);
    if (!same(&a->element[i], &b->element[i], path + at, len - at))
      return 0;
  }
  return 1;
}

static void fail_reply(sim_diff *d, const char *call, const rm_reply *real,
                       const rm_reply *model, const char *where) {
  static char detail[12000];
  char a[5000], b[5000];
  repr(real, a, sizeof a, 0);
  repr(model, b, sizeof b, 0);
  snprintf(detail, sizeof detail,
           "  redis-server: %s\n  model:        %s\n  (they part at: %s)", a, b,
           where);
  char what[1400];
  snprintf(what, sizeof what, "call %s", call);
  sim_fail(d, what, detail);
}

/* ---- commands ---- */

static int is_subscription(const char *p, size_t n) {
  static const char *const names[] = {
      "subscribe",  "unsubscribe",  "ssubscribe", "sunsubscribe",
      "psubscribe", "punsubscribe", NULL};
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == n && strncasecmp(p, names[i], n) == 0)
      return 1;
  return 0;
}

static void note_skip(sim_diff *d, const char *p, size_t n) {
  char name[24];
  size_t k = n < sizeof name - 1 ? n : sizeof name - 1;
  for (size_t i = 0; i < k; i++)
    name[i] = (char)(p[i] >= 'a' && p[i] <= 'z' ? p[i] - 'a' + 'A' : p[i]);
  name[k] = '\0';
  d->st.skipped++;
  for (size_t i = 0; i < d->nskips; i++)
    if (strcmp(d->skips[i].name, name) == 0) {
      d->skips[i].n++;
      return;
    }
  if (d->nskips < sizeof d->skips / sizeof d->skips[0]) {
    memcpy(d->skips[d->nskips].name, name, k + 1);
    d->skips[d->nskips++].n = 1;
  }
}

/* Direct HGETALL / HKEYS of a hash Redis keeps as a hash table (over its
 * listpack limits): the order is the table's, not insertion order. */
static int unordered_hash_read(sim_diff *d, int argc, const char *const *argv,
                               const size_t *lens) {
  if (argc != 2 ||
      !((lens[0] == 7 && strncasecmp(argv[0], "hgetall", 7) == 0) ||
        (lens[0] == 5 && strncasecmp(argv[0], "hkeys", 5) == 0)))
    return 0;
  const char *av[3] = {"OBJECT", "ENCODING", argv[1]};
  size_t al[3] = {6, 8, lens[1]};
  redisReply *x = redisCommandArgv(d->cmd, 3, av, al);
  int ht =
      x && x->type == REDIS_REPLY_STRING && strcmp(x->str, "hashtable") == 0;
  freeReplyObject(x);
  return ht;
}

static int cmp_pairs(const void *a, const void *b) {
  const rm_reply *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->str, y->str, n);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Sorts an HGETALL (pairs, step 2) or HKEYS (step 1) reply by field. */
static void sort_fields(rm_reply *r, int step) {
  if (r->type != RM_REPLY_ARRAY)
    return;
  if (step == 1) {
    qsort(r->element, r->elements, sizeof *r->element, cmp_pairs);
    return;
  }
  size_t n = r->elements / 2; /* bubble pairs: hashes are small */
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j + 1 < n - i; j++)
      if (cmp_pairs(&r->element[2 * j], &r->element[2 * j + 2]) > 0) {
        rm_reply t0 = r->element[2 * j], t1 = r->element[2 * j + 1];
        r->element[2 * j] = r->element[2 * j + 2];
        r->element[2 * j + 1] = r->element[2 * j + 3];
        r->element[2 * j + 2] = t0;
        r->element[2 * j + 3] = t1;
      }
}

static void count_run(sim_diff *d, int argc, const char *const *argv,
                      const size_t *lens, const rm_reply *mr) {
  sim_script *s = script_of_call(d, argc, argv, lens);
  if (s &&
      !(mr->type == RM_REPLY_ERROR && strncmp(mr->str, "NOSCRIPT", 8) == 0))
    s->runs++;
}

int sim_diff_exec(sim_diff *d, int conn, int argc, const char *const *argv,
                  const size_t *lens, rm_reply *out) {
  if (out)
    rm_reply_clear(out);
  if (argc < 1)
    return SIM_SKIPPED;
  d->step++;
  char call[1200];
  sim_describe_call(d, argc, argv, lens, call, sizeof call);
  snprintf(d->recent[d->step % 6], sizeof d->recent[0], "%lu @%lld c%d %.250s",
           d->step, (long long)d->now, conn, call);
  if (is_subscription(argv[0], lens[0])) {
    sim_subs_exec(d, conn, argc, argv, lens);
    d->st.subscriptions++;
    return SIM_SUBSCRIPTION;
  }
  if (!rm_has_command(argv[0], lens[0])) {
    note_skip(d, argv[0], lens[0]);
    return SIM_SKIPPED;
  }
  redisReply *rr = redisCommandArgv(d->cmd, argc, (const char **)argv, lens);
  if (!rr)
    th_fail(__FILE__, __LINE__, "redis-server: %s (call %s)", d->cmd->errstr,
            call);
  rm_reply real, model = {0};
  from_hiredis(&real, rr);
  freeReplyObject(rr);
  int rc = rm_command(d->m, argc, argv, lens, &model);
  sim_subs_drain(d);
  if (rc == RM_EMODEL) {
    char what[1600];
    snprintf(what, sizeof what, "a MODEL ERROR (%s) in call %s",
             rm_model_error(d->m), call);
    sim_fail(d, what, "  (the model does not implement what the call used)");
  }
  char where[600];
  if (!same(&real, &model, where, sizeof where)) {
    int unordered = unordered_hash_read(d, argc, argv, lens);
    int step = lens[0] == 5 ? 1 : 2;
    if (unordered)
      sort_fields(&real, step), sort_fields(&model, step);
    if (!unordered || !same(&real, &model, where, sizeof where))
      fail_reply(d, call, &real, &model, where);
  }
  count_run(d, argc, argv, lens, &model);
  d->st.compared++;
  rm_reply_clear(&real);
  if (out)
    *out = model;
  else
    rm_reply_clear(&model);
  return SIM_COMPARED;
}

void sim_diff_reset(sim_diff *d, int scripts) {
  sim_subs_drop_all(d);
  redisReply *x = redisCommand(d->cmd, "FLUSHALL");
  CHECK(x && x->type == REDIS_REPLY_STATUS);
  freeReplyObject(x);
  rm_flushall(d->m);
  if (scripts) {
    x = redisCommand(d->cmd, "SCRIPT FLUSH");
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    freeReplyObject(x);
    rm_script_flush(d->m);
  }
}

/* ---- keyspaces ---- */

typedef struct key_list {
  char **k;
  size_t *len;
  size_t n, cap;
} key_list;

static void key_add(void *user, const char *key, size_t klen, int type,
                    int64_t expire) {
  (void)type;
  (void)expire;
  key_list *l = user;
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    l->k = realloc(l->k, l->cap * sizeof *l->k);
    l->len = realloc(l->len, l->cap * sizeof *l->len);
    CHECK(l->k && l->len);
  }
  l->k[l->n] = malloc(klen + 1);
  CHECK(l->k[l->n] != NULL);
  memcpy(l->k[l->n], key, klen);
  l->k[l->n][klen] = '\0';
  l->len[l->n++] = klen;
}

static void key_sort(key_list *l) {
  for (size_t i = 1; i < l->n; i++) /* insertion sort: few keys */
    for (size_t j = i; j > 0; j--) {
      size_t a = l->len[j - 1], b = l->len[j], n = a < b ? a : b;
      int c = memcmp(l->k[j - 1], l->k[j], n);
      if (c < 0 || (c == 0 && a <= b))
        break;
      char *tk = l->k[j - 1];
      l->k[j - 1] = l->k[j];
      l->k[j] = tk;
      l->len[j - 1] = b;
      l->len[j] = a;
    }
}

static void key_free(key_list *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->k[i]);
  free(l->k);
  free(l->len);
}

/* The same read on both sides, compared (a hash as a set of pairs when
 * Redis keeps it as a hash table). */
static void compare_read(sim_diff *d, const char *const *av, const size_t *al,
                         int argc) {
  d->step++;
  char call[600];
  sim_describe_call(d, argc, av, al, call, sizeof call);
  snprintf(d->recent[d->step % 6], sizeof d->recent[0],
           "%lu @%lld keyspace check: %.240s", d->step, (long long)d->now,
           call);
  redisReply *rr = redisCommandArgv(d->cmd, argc, (const char **)av, al);
  CHECK_MSG(rr != NULL, "redis-server: %s", d->cmd->errstr);
  rm_reply real, model = {0};
  from_hiredis(&real, rr);
  freeReplyObject(rr);
  rm_command(d->m, argc, av, al, &model);
  char where[600];
  if (!same(&real, &model, where, sizeof where)) {
    int unordered = unordered_hash_read(d, argc, av, al);
    if (unordered)
      sort_fields(&real, 2), sort_fields(&model, 2);
    if (!unordered || !same(&real, &model, where, sizeof where)) {
      char what[800];
      snprintf(what, sizeof what, "keyspace check: %s", call);
      fail_reply(d, what, &real, &model, where);
    }
  }
  rm_reply_clear(&real);
  rm_reply_clear(&model);
}

static void compare_key(sim_diff *d, const char *k, size_t kl) {
  const char *av[5] = {"TYPE", k, NULL, NULL, NULL};
  size_t al[5] = {4, kl, 0, 0, 0};
  compare_read(d, av, al, 2);
  av[0] = "PTTL", al[0] = 4;
  compare_read(d, av, al, 2);
  rm_reply t = {0};
  const char *tv[2] = {"TYPE", k};
  size_t tl[2] = {4, kl};
  rm_command(d->m, 2, tv, tl, &t);
  const char *ty = t.str ? t.str : "";
  if (strcmp(ty, "string") == 0) {
    av[0] = "GET", al[0] = 3;
    compare_read(d, av, al, 2);
  } else if (strcmp(ty, "hash") == 0) {
    av[0] = "HGETALL", al[0] = 7;
    compare_read(d, av, al, 2);
  } else if (strcmp(ty, "list") == 0) {
    const char *lv[4] = {"LRANGE", k, "0", "-1"};
    size_t ll[4] = {6, kl, 1, 2};
    compare_read(d, lv, ll, 4);
  } else if (strcmp(ty, "zset") == 0) {
    const char *zv[5] = {"ZRANGE", k, "0", "-1", "WITHSCORES"};
    size_t zl[5] = {6, kl, 1, 2, 10};
    compare_read(d, zv, zl, 5);
  }
  rm_reply_clear(&t);
  d->st.keys_compared++;
}

void sim_diff_check_keyspace(sim_diff *d) {
  sim_subs_check_quiet(d);
  key_list real = {0}, model = {0};
  redisReply *x = redisCommand(d->cmd, "KEYS *");
  CHECK(x && x->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < x->elements; i++)
    key_add(&real, x->element[i]->str, x->element[i]->len, 0, 0);
  freeReplyObject(x);
  rm_foreach_key(d->m, key_add, &model);
  key_sort(&real);
  key_sort(&model);
  for (size_t i = 0, j = 0; i < real.n || j < model.n;) {
    int c = i == real.n ? 1 : j == model.n ? -1 : 0;
    if (!c) {
      size_t n = real.len[i] < model.len[j] ? real.len[i] : model.len[j];
      c = memcmp(real.k[i], model.k[j], n);
      if (!c)
        c = (real.len[i] > model.len[j]) - (real.len[i] < model.len[j]);
    }
    if (c) {
      char e[400], what[600];
      const char *k = c < 0 ? real.k[i] : model.k[j];
      size_t kl = c < 0 ? real.len[i] : model.len[j];
      sim_escape(k, kl, 200, e, sizeof e);
      snprintf(what, sizeof what, "keyspace check: key \"%s\" exists only %s",
               e, c < 0 ? "on redis-server" : "in the model");
      sim_fail(d, what, "  (KEYS * on the server, the model's live keys)");
    }
    compare_key(d, real.k[i], real.len[i]);
    i++, j++;
  }
  key_free(&real);
  key_free(&model);
  d->st.keyspace_checks++;
}
