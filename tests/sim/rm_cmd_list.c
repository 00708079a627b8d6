/*
 * rm_cmd_list.c -- the Redis model's list commands with Redis 7.0's
 * semantics (rm_int.h): RPUSH, LPOP (with its count), LLEN, LINDEX, LPOS
 * (RANK COUNT MAXLEN), LRANGE, LREM; an emptied list is deleted. Each
 * checks its arguments and the key in the order Redis does (LINDEX looks
 * at the key before the index, LRANGE and LREM after).
 */
#include <limits.h>
#include <stdlib.h>

#include "rm_int.h"

static void c_rpush(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_LIST, &o))
    return;
  if (!o)
    o = rm_ks_create(c->m, c->argv[1].p, c->argv[1].len, RM_T_LIST);
  for (int i = 2; i < c->argc; i++)
    rm_list_push_tail(&o->v.l, c->argv[i].p, c->argv[i].len);
  rm_out_int(c, (long long)o->v.l.n);
}

static void c_lpop(rm_ctx *c) {
  long long count = 0;
  int has = 0;
  if (c->argc > 3) {
    rm_out_arity(c, "lpop");
    return;
  }
  if (c->argc == 3) {
    if (rm_get_positive(c, c->argv[2], &count, NULL))
      return;
    has = 1;
  }
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (!o) {
    if (has)
      rm_out_nil_array(c);
    else
      rm_out_nil(c);
    return;
  }
  if (o->type != RM_T_LIST) {
    rm_out_wrongtype(c);
    return;
  }
  size_t n =
      has ? (size_t)(count < (long long)o->v.l.n ? count : (long long)o->v.l.n)
          : 1;
  if (has)
    rm_out_array(c, n);
  for (size_t i = 0; i < n; i++) {
    rm_bytes b;
    rm_list_pop_head(&o->v.l, &b);
    rm_out_bulk(c, b.p, b.len);
    rm_bytes_free(&b);
  }
  rm_ks_delete_if_empty(c->m, o);
}

static void c_llen(rm_ctx *c) {
  rm_obj *o;
  if (!rm_lookup_typed(c, 1, RM_T_LIST, &o))
    rm_out_int(c, o ? (long long)o->v.l.n : 0);
}

static void c_lindex(rm_ctx *c) {
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (!o) {
    rm_out_nil(c);
    return;
  }
  if (o->type != RM_T_LIST) {
    rm_out_wrongtype(c);
    return;
  }
  long long i;
  if (rm_get_ll(c, c->argv[2], &i))
    return;
  long long n = (long long)o->v.l.n;
  if (i < 0)
    i += n;
  if (i < 0 || i >= n) {
    rm_out_nil(c);
    return;
  }
  rm_bytes *b = rm_list_at(&o->v.l, (size_t)i);
  rm_out_bulk(c, b->p, b->len);
}

typedef struct lpos_opts {
  long long rank, count, maxlen;
} lpos_opts;

static int lpos_parse(rm_ctx *c, lpos_opts *p) {
  *p = (lpos_opts){1, -1, 0};
  for (int j = 3; j < c->argc; j++) {
    int more = c->argc - 1 - j;
    rm_arg a = c->argv[j];
    if (rm_arg_is(a, "rank") && more) {
      if (rm_get_range_ll(c, c->argv[++j], -LLONG_MAX, LLONG_MAX, &p->rank,
                          NULL))
        return -1;
      if (p->rank == 0) {
        rm_out_error(c, "ERR RANK can't be zero: use 1 to start from the "
                        "first match, 2 from the second ... or use negative "
                        "to start from the end of the list");
        return -1;
      }
    } else if (rm_arg_is(a, "count") && more) {
      if (rm_get_positive(c, c->argv[++j], &p->count,
                          "COUNT can't be negative"))
        return -1;
    } else if (rm_arg_is(a, "maxlen") && more) {
      if (rm_get_positive(c, c->argv[++j], &p->maxlen,
                          "MAXLEN can't be negative"))
        return -1;
    } else {
      rm_out_syntax(c);
      return -1;
    }
  }
  return 0;
}

static void c_lpos(rm_ctx *c) {
  lpos_opts p;
  if (lpos_parse(c, &p))
    return;
  int back = p.rank < 0;
  long long rank = back ? -p.rank : p.rank;
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (!o) {
    if (p.count != -1)
      rm_out_array(c, 0);
    else
      rm_out_nil(c);
    return;
  }
  if (o->type != RM_T_LIST) {
    rm_out_wrongtype(c);
    return;
  }
  long long n = (long long)o->v.l.n, found[64], nf = 0, total = 0;
  long long want = p.count == -1 ? 1 : p.count; /* COUNT 0: all */
  long long *all = found;
  size_t cap = 64;
  for (long long k = 0; k < n && (p.maxlen == 0 || k < p.maxlen); k++) {
    long long idx = back ? n - 1 - k : k;
    rm_bytes *b = rm_list_at(&o->v.l, (size_t)idx);
    if (!rm_arg_eq(c->argv[2], b->p, b->len) || ++total < rank)
      continue;
    if ((size_t)nf == cap) {
      long long *bigger = rm_xmalloc(cap * 2 * sizeof *bigger);
      for (long long q = 0; q < nf; q++)
        bigger[q] = all[q];
      if (all != found)
        free(all);
      all = bigger;
      cap *= 2;
    }
    all[nf++] = idx;
    if (want && nf == want)
      break;
  }
  if (p.count == -1) {
    if (nf)
      rm_out_int(c, all[0]);
    else
      rm_out_nil(c);
  } else {
    rm_out_array(c, (size_t)nf);
    for (long long q = 0; q < nf; q++)
      rm_out_int(c, all[q]);
  }
  if (all != found)
    free(all);
}

static void c_lrange(rm_ctx *c) {
  long long start, end;
  if (rm_get_ll(c, c->argv[2], &start) || rm_get_ll(c, c->argv[3], &end))
    return;
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_LIST, &o))
    return;
  long long n = o ? (long long)o->v.l.n : 0;
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
  rm_out_array(c, (size_t)(end - start + 1));
  for (long long i = start; i <= end; i++) {
    rm_bytes *b = rm_list_at(&o->v.l, (size_t)i);
    rm_out_bulk(c, b->p, b->len);
  }
}

static void c_lrem(rm_ctx *c) {
  long long count;
  if (rm_get_ll(c, c->argv[2], &count))
    return;
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_LIST, &o))
    return;
  long long removed = 0;
  if (o) {
    rm_list *l = &o->v.l;
    int back = count < 0;
    long long limit = back ? -count : count;
    for (long long k = 0; k < (long long)l->n;) {
      size_t idx = back ? l->n - 1 - (size_t)k : (size_t)k;
      rm_bytes *b = rm_list_at(l, idx);
      if (rm_arg_eq(c->argv[3], b->p, b->len)) {
        rm_list_remove_at(l, idx);
        removed++;
        if (limit && removed == limit)
          break;
        continue; /* the next candidate now has the same k, either way */
      }
      k++;
    }
    rm_ks_delete_if_empty(c->m, o);
  }
  rm_out_int(c, removed);
}

const rm_cmd rm_cmds_list[] = {
    {"rpush", -3, c_rpush, 0, NULL}, {"lpop", -2, c_lpop, 0, NULL},
    {"llen", 2, c_llen, 0, NULL},    {"lindex", 3, c_lindex, 0, NULL},
    {"lpos", -3, c_lpos, 0, NULL},   {"lrange", 4, c_lrange, 0, NULL},
    {"lrem", 4, c_lrem, 0, NULL},    {NULL, 0, NULL, 0, NULL}};
