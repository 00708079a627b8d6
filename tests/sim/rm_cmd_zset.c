/*
 * rm_cmd_zset.c -- the Redis model's sorted-set commands with Redis 7.0's
 * semantics (rm_int.h): ZADD (NX XX GT LT CH INCR) and ZINCRBY (the same
 * code, as in Redis), ZSCORE, ZREM, ZCARD, ZRANGE by rank or BYSCORE (REV,
 * LIMIT, WITHSCORES; BYLEX is not modelled) and ZRANGEBYSCORE. Scores are
 * doubles, replied as "%.17g" (Redis 7.0's RESP2 double); a score range's
 * ends parse as zslParseRange does ('(' exclusive, strtod up to the end,
 * so "" reads as 0).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

enum { Z_NX = 1, Z_XX = 2, Z_GT = 4, Z_LT = 8, Z_CH = 16, Z_INCR = 32 };

/* zsetAdd for one element: 0 = NaN; else *out: 1 added, 2 updated, 4 nop */
static int zadd_one(rm_zset *z, int fl, double score, rm_arg m, int *out,
                    double *newscore) {
  *out = 0;
  if (isnan(score))
    return 0;
  long i = rm_zset_find(z, m.p, m.len);
  if (i >= 0) {
    double cur = z->e[i].score;
    if (fl & Z_NX) {
      *out = 4;
      return 1;
    }
    if (fl & Z_INCR) {
      score += cur;
      if (isnan(score))
        return 0;
    }
    if (((fl & Z_LT) && score >= cur) || ((fl & Z_GT) && score <= cur)) {
      *out = 4;
      return 1;
    }
    *newscore = score;
    if (score != cur) {
      rm_zset_rescore(z, (size_t)i, score);
      *out = 2;
    }
    return 1;
  }
  if (fl & Z_XX) {
    *out = 4;
    return 1;
  }
  rm_zset_insert(z, score, m.p, m.len);
  *newscore = score;
  *out = 1;
  return 1;
}

/* Options, pairs and their checks; -1 after the reply. */
static int zadd_parse(rm_ctx *c, int *fl, int *si, int *pairs) {
  for (*si = 2; *si < c->argc; (*si)++) {
    rm_arg a = c->argv[*si];
    int f = rm_arg_is(a, "nx")     ? Z_NX
            : rm_arg_is(a, "xx")   ? Z_XX
            : rm_arg_is(a, "ch")   ? Z_CH
            : rm_arg_is(a, "incr") ? Z_INCR
            : rm_arg_is(a, "gt")   ? Z_GT
            : rm_arg_is(a, "lt")   ? Z_LT
                                   : 0;
    if (!f)
      break;
    *fl |= f;
  }
  int el = c->argc - *si;
  if (el % 2 || !el) {
    rm_out_syntax(c);
    return -1;
  }
  *pairs = el / 2;
  if ((*fl & Z_NX) && (*fl & Z_XX)) {
    rm_out_error(c, "ERR XX and NX options at the same time are not "
                    "compatible");
    return -1;
  }
  if (((*fl & Z_GT) && (*fl & Z_NX)) || ((*fl & Z_LT) && (*fl & Z_NX)) ||
      ((*fl & Z_GT) && (*fl & Z_LT))) {
    rm_out_error(c, "ERR GT, LT, and/or NX options at the same time are not "
                    "compatible");
    return -1;
  }
  if ((*fl & Z_INCR) && *pairs > 1) {
    rm_out_error(c, "ERR INCR option supports a single increment-element "
                    "pair");
    return -1;
  }
  return 0;
}

static void zadd_generic(rm_ctx *c, int fl) {
  int si, pairs;
  if (zadd_parse(c, &fl, &si, &pairs))
    return;
  double stack[16], *scores = pairs <= 16
                                  ? stack
                                  : rm_xmalloc(sizeof(double) * (size_t)pairs);
  rm_obj *o = NULL;
  long long added = 0, updated = 0, processed = 0;
  double score = 0;
  for (int j = 0; j < pairs; j++)
    if (rm_str2d(c->argv[si + 2 * j].p, c->argv[si + 2 * j].len, &scores[j])) {
      rm_out_error(c, "ERR value is not a valid float");
      goto done;
    }
  if (rm_lookup_typed(c, 1, RM_T_ZSET, &o))
    goto done;
  if (!o) {
    if (fl & Z_XX)
      goto reply;
    o = rm_ks_create(c->m, c->argv[1].p, c->argv[1].len, RM_T_ZSET);
  }
  for (int j = 0; j < pairs; j++) {
    int out;
    double ns = 0;
    if (!zadd_one(&o->v.z, fl, scores[j], c->argv[si + 2 * j + 1], &out, &ns)) {
      rm_out_error(c, "ERR resulting score is not a number (NaN)");
      rm_ks_delete_if_empty(c->m, o);
      goto done;
    }
    added += out == 1;
    updated += out == 2;
    processed += out != 4;
    score = ns;
  }
reply:
  if (fl & Z_INCR) {
    if (processed)
      rm_out_double(c, score);
    else
      rm_out_nil(c);
  } else {
    rm_out_int(c, (fl & Z_CH) ? added + updated : added);
  }
done:
  if (scores != stack)
    free(scores);
}

static void c_zadd(rm_ctx *c) { zadd_generic(c, 0); }
static void c_zincrby(rm_ctx *c) { zadd_generic(c, Z_INCR); }

static void c_zscore(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_ZSET, &o))
    return;
  long i = o ? rm_zset_find(&o->v.z, c->argv[2].p, c->argv[2].len) : -1;
  if (i < 0)
    rm_out_nil(c);
  else
    rm_out_double(c, o->v.z.e[i].score);
}

static void c_zrem(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_ZSET, &o))
    return;
  long long n = 0;
  for (int i = 2; o && i < c->argc; i++) {
    long at = rm_zset_find(&o->v.z, c->argv[i].p, c->argv[i].len);
    if (at < 0)
      continue;
    rm_zset_remove_at(&o->v.z, (size_t)at);
    n++;
    if (o->v.z.n == 0) {
      rm_ks_delete(c->m, o);
      break;
    }
  }
  rm_out_int(c, n);
}

static void c_zcard(rm_ctx *c) {
  rm_obj *o;
  if (!rm_lookup_typed(c, 1, RM_T_ZSET, &o))
    rm_out_int(c, o ? (long long)o->v.z.n : 0);
}

/* ---- ranges ---- */

typedef struct zrange_q {
  int byscore, rev, withscores;
  long long offset, limit; /* limit -1: none */
  long long start, end;    /* by rank */
  double min, max;         /* by score */
  int minex, maxex;
} zrange_q;

/* zslParseRange's reading of one end: 0, or -1 (not a float). */
static int score_end(rm_arg a, double *v, int *ex) {
  char stack[64];
  char *buf = a.len < sizeof stack ? stack : rm_xmalloc(a.len + 1);
  memcpy(buf, a.p, a.len);
  buf[a.len] = '\0';
  *ex = buf[0] == '(';
  char *end;
  *v = strtod(buf + *ex, &end);
  int ok = end[0] == '\0' && !isnan(*v);
  if (buf != stack)
    free(buf);
  return ok ? 0 : -1;
}

/* zrangeGenericCommand's parse (keyword forms: zrange 1, zrangebyscore
 * 0); -1 after the reply, 1 = BYLEX (not modelled). */
static int zrange_parse(rm_ctx *c, int keywords, zrange_q *q) {
  *q = (zrange_q){0};
  q->byscore = !keywords;
  q->limit = -1;
  int auto_dir = keywords, auto_type = keywords, bylex = 0;
  for (int j = 4; j < c->argc; j++) {
    int left = c->argc - j - 1;
    rm_arg a = c->argv[j];
    if (rm_arg_is(a, "withscores")) {
      q->withscores = 1;
    } else if (rm_arg_is(a, "limit") && left >= 2) {
      if (rm_get_ll(c, c->argv[j + 1], &q->offset) ||
          rm_get_ll(c, c->argv[j + 2], &q->limit))
        return -1;
      j += 2;
    } else if (auto_dir && rm_arg_is(a, "rev")) {
      q->rev = 1, auto_dir = 0;
    } else if (auto_type && rm_arg_is(a, "bylex")) {
      bylex = 1, auto_type = 0;
    } else if (auto_type && rm_arg_is(a, "byscore")) {
      q->byscore = 1, auto_type = 0;
    } else {
      rm_out_syntax(c);
      return -1;
    }
  }
  if (q->limit != -1 && !q->byscore && !bylex) {
    rm_out_error(c, "ERR syntax error, LIMIT is only supported in "
                    "combination with either BYSCORE or BYLEX");
    return -1;
  }
  if (q->withscores && bylex) {
    rm_out_error(c, "ERR syntax error, WITHSCORES not supported in "
                    "combination with BYLEX");
    return -1;
  }
  if (bylex)
    return 1;
  int lo = 2, hi = 3;
  if (q->rev && q->byscore)
    lo = 3, hi = 2; /* the range is given as max, min */
  if (!q->byscore)
    return rm_get_ll(c, c->argv[lo], &q->start) ||
                   rm_get_ll(c, c->argv[hi], &q->end)
               ? -1
               : 0;
  if (score_end(c->argv[lo], &q->min, &q->minex) ||
      score_end(c->argv[hi], &q->max, &q->maxex)) {
    rm_out_error(c, "ERR min or max is not a float");
    return -1;
  }
  return 0;
}

static void emit(rm_ctx *c, const rm_zset *z, size_t i, int withscores) {
  rm_out_bulk(c, z->e[i].m.p, z->e[i].m.len);
  if (withscores)
    rm_out_double(c, z->e[i].score);
}

static void by_rank(rm_ctx *c, const rm_zset *z, const zrange_q *q) {
  long long n = (long long)z->n, start = q->start, end = q->end;
  if (start < 0)
    start += n;
  if (end < 0)
    end += n;
  if (start < 0)
    start = 0;
  if (start > end || start >= n) {
    rm_out_array(c, 0);
    return;
  }
  if (end >= n)
    end = n - 1;
  rm_out_array(c, (size_t)(end - start + 1) * (q->withscores ? 2 : 1));
  for (long long r = start; r <= end; r++)
    emit(c, z, (size_t)(q->rev ? n - 1 - r : r), q->withscores);
}

static int gte_min(const zrange_q *q, double v) {
  return q->minex ? v > q->min : v >= q->min;
}
static int lte_max(const zrange_q *q, double v) {
  return q->maxex ? v < q->max : v <= q->max;
}

static void by_score(rm_ctx *c, const rm_zset *z, const zrange_q *q) {
  long long n = (long long)z->n;
  if (q->offset > 0 && q->offset >= n) {
    rm_out_array(c, 0);
    return;
  }
  /* the first in range from the direction's start */
  long long k = 0;
  if (!q->rev)
    while (k < n && !gte_min(q, z->e[k].score))
      k++;
  else
    while (k < n && !lte_max(q, z->e[n - 1 - k].score))
      k++;
  for (long long off = q->offset; k < n && off--;)
    k++;
  size_t *hit = rm_xmalloc(sizeof *hit * (size_t)(n ? n : 1));
  size_t nh = 0;
  for (long long lim = q->limit; k < n && lim--; k++) {
    size_t i = (size_t)(q->rev ? n - 1 - k : k);
    if (q->rev ? !gte_min(q, z->e[i].score) : !lte_max(q, z->e[i].score))
      break;
    hit[nh++] = i;
  }
  rm_out_array(c, nh * (q->withscores ? 2 : 1));
  for (size_t h = 0; h < nh; h++)
    emit(c, z, hit[h], q->withscores);
  free(hit);
}

static void zrange_generic(rm_ctx *c, int keywords) {
  zrange_q q;
  int r = zrange_parse(c, keywords, &q);
  if (r == 1)
    rm_model_fail(c, "ZRANGE BYLEX is not modelled");
  if (r)
    return;
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_ZSET, &o))
    return;
  if (!o)
    rm_out_array(c, 0);
  else if (q.byscore)
    by_score(c, &o->v.z, &q);
  else
    by_rank(c, &o->v.z, &q);
}

static void c_zrange(rm_ctx *c) { zrange_generic(c, 1); }
static void c_zrangebyscore(rm_ctx *c) { zrange_generic(c, 0); }

const rm_cmd rm_cmds_zset[] = {{"zadd", -4, c_zadd, 0, NULL},
                               {"zincrby", 4, c_zincrby, 0, NULL},
                               {"zscore", 3, c_zscore, 0, NULL},
                               {"zrem", -3, c_zrem, 0, NULL},
                               {"zcard", 2, c_zcard, 0, NULL},
                               {"zrange", -4, c_zrange, 0, NULL},
                               {"zrangebyscore", -4, c_zrangebyscore, 0, NULL},
                               {NULL, 0, NULL, 0, NULL}};
