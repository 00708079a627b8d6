/*
 * etcd_status.c -- what an operator asks of the etcd store: who holds a
 * lock and who waits (dlock_status_query, dlock_fair_waiters_query), the
 * lock names there are (dlock_lock_names_query), who a client is
 * (dlock_client_info_query), and the force unlock.
 *
 * Every answer is one linearizable read of the name's keys sorted by create
 * revision: the first is the holder, the rest wait in that order. A key's
 * value names its holder "<client id>:<thread id>" when dlock made it; keys
 * of etcdctl or Go clients have no value and show as "etcd-lease:<hex>".
 * The TTL left is the holder's lease's (/v3/lease/timetolive: whole
 * seconds). Client info is the key <prefix>dlock_client:{<client id>}
 * under the client's session lease (etcd_lease.c writes it), so it goes
 * with the client.
 *
 * FORCE UNLOCK deletes the holder's key IF its create revision is still the
 * one just read, sent once (a second copy could delete the next holder's
 * key): the holder's own-key watch reports the loss at once.
 */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

int dlock__etcd_read_keys(dlock__etcd *e, const char *name,
                          dlock__etcd_kvs *kvs, int keys_only) {
  dlock__sb from, to, b;
  dlock__sb_init(&from);
  dlock__sb_init(&to);
  dlock__sb_init(&b);
  dlock__etcd_range(e, &from, &to, name);
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, from.p, from.len);
  dlock__sb_adds(&b, "\",\"range_end\":\"");
  dlock__etcd_b64(&b, to.p, to.len);
  dlock__sb_adds(&b, "\",\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\"");
  dlock__sb_adds(&b, keys_only ? ",\"keys_only\":true}" : "}");
  dlock__etcd_res res = {0};
  int rc =
      from.oom || to.oom || b.oom
          ? dlock__fail(DLOCK_ENOMEM, "out of memory")
          : dlock__etcd_call(e, "/v3/kv/range", &b, DLOCK__ETCD_RETRY, &res);
  if (rc == 0) {
    rc = dlock__etcd_kvs_parse(res.json, &from, kvs);
    json_object_put(res.json);
  }
  dlock__sb_free(&from);
  dlock__sb_free(&to);
  dlock__sb_free(&b);
  return rc;
}

/* "<36-char id>:<digits>": a value dlock wrote. */
static int dlock_value(const dlock__etcd_kv *kv) {
  if (kv->vlen < 38 || kv->value[36] != ':')
    return 0;
  for (size_t i = 37; i < kv->vlen; i++)
    if (kv->value[i] < '0' || kv->value[i] > '9')
      return 0;
  return 1;
}

/* The owner text of kv (malloc'd): its value, or "etcd-lease:<hex>". */
static char *owner_of(const dlock__etcd_kv *kv) {
  if (dlock_value(kv))
    return dlock__strndup(kv->value, kv->vlen);
  const char *slash = strrchr(kv->key, '/');
  char buf[64];
  snprintf(buf, sizeof buf, "etcd-lease:%.20s", slash ? slash + 1 : "?");
  return dlock__strdup(buf);
}

/* The TTL left of lease id in ms (whole seconds): -1 no lease, -2 gone. */
static int lease_ttl(dlock__etcd *e, int64_t id, long long *ms) {
  *ms = -1;
  if (!id)
    return 0;
  char body[80];
  snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)id);
  dlock__etcd_res res = {0};
  int rc = dlock__etcd_calls(e, "/v3/lease/timetolive", body, DLOCK__ETCD_RETRY,
                             &res);
  if (rc)
    return rc;
  int64_t t = dlock__etcd_int(res.json, "TTL");
  json_object_put(res.json);
  *ms = t >= 0 ? t * 1000 : -2;
  return 0;
}

int dlock__etcd_status(dlock_client *c, const char *name, dlock_status *s) {
  dlock__etcd_kvs kvs;
  int rc = dlock__etcd_read_keys(c->etcd, name, &kvs, 0);
  if (rc)
    return rc;
  s->locked = kvs.n > 0;
  s->ttl_ms = -2;
  if (kvs.n > 0) {
    s->holders = dlock__calloc(1, sizeof *s->holders);
    if (!s->holders || !(s->holders[0].owner = owner_of(&kvs.v[0]))) {
      free(s->holders);
      s->holders = NULL;
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    } else {
      s->holders[0].count = 1;
      s->n_holders = 1;
      rc = lease_ttl(c->etcd, kvs.v[0].lease, &s->ttl_ms);
      if (rc == 0 && s->ttl_ms == -2)
        s->ttl_ms = 0; /* expired between the two reads */
    }
  }
  if (rc && s->holders) {
    free(s->holders[0].owner);
    free(s->holders);
    s->holders = NULL;
    s->n_holders = 0;
  }
  dlock__etcd_kvs_free(&kvs);
  return rc;
}

int dlock__etcd_waiters(dlock_client *c, const char *name, char ***waiters,
                        size_t *n) {
  dlock__etcd_kvs kvs;
  int rc = dlock__etcd_read_keys(c->etcd, name, &kvs, 0);
  if (rc)
    return rc;
  size_t m = kvs.n > 1 ? kvs.n - 1 : 0;
  char **w = m ? dlock__calloc(m, sizeof *w) : NULL;
  if (m && !w) {
    (void)dlock__fail(DLOCK_ENOMEM, "out of memory");
    rc = DLOCK_ENOMEM;
  }
  for (size_t i = 0; rc == 0 && w && i < m; i++)
    if (!(w[i] = owner_of(&kvs.v[i + 1]))) {
      dlock_fair_waiters_free(w, i);
      w = NULL;
      (void)dlock__fail(DLOCK_ENOMEM, "out of memory");
      rc = DLOCK_ENOMEM;
    }
  dlock__etcd_kvs_free(&kvs);
  if (rc == 0) {
    *waiters = w;
    *n = m;
  }
  return rc;
}

int dlock__etcd_force_unlock(dlock_mutex *m) {
  dlock__etcd *e = m->c->etcd;
  dlock__etcd_kvs kvs;
  int rc = dlock__etcd_read_keys(e, m->name, &kvs, 1);
  if (rc || kvs.n == 0) {
    dlock__etcd_kvs_free(&kvs);
    return rc;
  }
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, "{\"compare\":[{\"key\":\"");
  dlock__etcd_b64(&b, kvs.v[0].key, kvs.v[0].klen);
  dlock__sb_adds(&b, "\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                     "\"create_revision\":");
  dlock__etcd_jint(&b, kvs.v[0].create);
  dlock__sb_adds(&b, "}],\"success\":[{\"request_delete_range\":{\"key\":\"");
  dlock__etcd_b64(&b, kvs.v[0].key, kvs.v[0].klen);
  dlock__sb_adds(&b, "\"}}]}");
  dlock__etcd_kvs_free(&kvs);
  dlock__etcd_res res = {0};
  rc = b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : dlock__etcd_call(e, "/v3/kv/txn", &b, DLOCK__ETCD_ONCE, &res);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  int ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
  json_object_put(res.json);
  return ok ? 1 : 0;
}

/* The name of lock key k (<prefix><name>/<hex>) into *name, or 0 when k is
 * no lock key (the client info keys, other data). */
static int name_of(const dlock__etcd *e, const dlock__etcd_kv *k,
                   const char **name, size_t *len) {
  if (k->klen <= e->prefix_len || memcmp(k->key, e->prefix, e->prefix_len) != 0)
    return 0;
  const char *slash = strrchr(k->key, '/');
  if (!slash || slash == k->key + e->prefix_len || !slash[1] ||
      strlen(slash + 1) > 16)
    return 0;
  for (const char *p = slash + 1; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return 0;
  *name = k->key + e->prefix_len;
  *len = (size_t)(slash - *name);
  return 1;
}

/* Sends the range request body b (DLOCK_ENOMEM instead when b or from,
 * the buffer it was made from, ran out of memory), frees both and parses
 * the answer's keys into kvs (left empty on a failure). 0 or a code. */
static int range_kvs(dlock__etcd *e, dlock__sb *b, dlock__sb *from,
                     dlock__etcd_kvs *kvs) {
  kvs->v = NULL;
  kvs->n = 0;
  dlock__etcd_res res = {0};
  int rc = b->oom || from->oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                               : dlock__etcd_call(e, "/v3/kv/range", b,
                                                  DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(b);
  dlock__sb_free(from);
  if (rc)
    return rc;
  rc = dlock__etcd_kvs_parse(res.json, NULL, kvs);
  json_object_put(res.json);
  return rc;
}

/* Every key under the prefix (keys only, in key order). */
static int read_all(dlock__etcd *e, dlock__etcd_kvs *kvs) {
  dlock__sb b, end;
  dlock__sb_init(&b);
  dlock__sb_init(&end);
  /* the prefix's range: P to P with its last byte + 1; no prefix: all */
  dlock__sb_add(&end, e->prefix_len ? e->prefix : "\0",
                e->prefix_len ? e->prefix_len : 1);
  if (e->prefix_len)
    end.p[end.len - 1]++;
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, e->prefix_len ? e->prefix : "\0",
                  e->prefix_len ? e->prefix_len : 1);
  dlock__sb_adds(&b, "\",\"range_end\":\"");
  dlock__etcd_b64(&b, end.p, end.len);
  dlock__sb_adds(&b, "\",\"keys_only\":true}");
  return range_kvs(e, &b, &end, kvs);
}

int dlock__etcd_names(dlock_client *c, const char *pattern, char ***names,
                      size_t *n) {
  dlock__etcd *e = c->etcd;
  dlock__etcd_kvs kvs;
  int rc = read_all(e, &kvs);
  if (rc)
    return rc;
  char **out = kvs.n ? dlock__calloc(kvs.n, sizeof *out) : NULL;
  size_t k = 0;
  if (kvs.n && !out) {
    (void)dlock__fail(DLOCK_ENOMEM, "out of memory");
    rc = DLOCK_ENOMEM;
  }
  for (size_t i = 0; rc == 0 && out && i < kvs.n; i++) {
    const char *nm;
    size_t nl;
    if (!name_of(e, &kvs.v[i], &nm, &nl))
      continue;
    if (k > 0 && strlen(out[k - 1]) == nl && memcmp(out[k - 1], nm, nl) == 0)
      continue; /* keys come in key order: one name's keys are together */
    char *s = dlock__strndup(nm, nl);
    if (!s) {
      (void)dlock__fail(DLOCK_ENOMEM, "out of memory");
      rc = DLOCK_ENOMEM;
      break;
    }
    if (pattern && fnmatch(pattern, s, 0) != 0) {
      free(s);
      continue;
    }
    out[k++] = s;
  }
  dlock__etcd_kvs_free(&kvs);
  if (rc) {
    dlock_fair_waiters_free(out, k);
    return rc;
  }
  if (k == 0) {
    free(out);
    out = NULL;
  }
  *names = out;
  *n = k;
  return 0;
}

/* The value of field `f` ("f=...\n") of an info value into buf. */
static void info_field(const char *v, const char *f, char *buf, size_t n) {
  size_t fl = strlen(f);
  buf[0] = '\0';
  for (const char *p = v; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len > fl && memcmp(p, f, fl) == 0 && p[fl] == '=') {
      size_t vl = len - fl - 1 < n - 1 ? len - fl - 1 : n - 1;
      memcpy(buf, p + fl + 1, vl);
      buf[vl] = '\0';
      return;
    }
    p = nl ? nl + 1 : NULL;
  }
}

int dlock__etcd_client_info(dlock_client *c, const char *owner,
                            dlock_client_info *info) {
  dlock__etcd *e = c->etcd;
  dlock__sb k, b;
  dlock__sb_init(&k);
  dlock__sb_init(&b);
  dlock__sb_add(&k, e->prefix, e->prefix_len);
  dlock__sb_adds(&k, "dlock_client:{");
  dlock__sb_add(&k, owner, DLOCK__UUID_LEN);
  dlock__sb_adds(&k, "}");
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, k.p, k.len);
  dlock__sb_adds(&b, "\"}");
  dlock__etcd_kvs kvs;
  int rc = range_kvs(e, &b, &k, &kvs);
  if (rc || kvs.n == 0) {
    dlock__etcd_kvs_free(&kvs);
    return rc;
  }
  char num[32];
  const char *v = kvs.v[0].value;
  info_field(v, "host", info->host, sizeof info->host);
  info_field(v, "program", info->program, sizeof info->program);
  info_field(v, "pid", num, sizeof num);
  info->pid = strtoll(num, NULL, 10);
  info_field(v, "started", num, sizeof num);
  info->started_ms = strtoll(num, NULL, 10);
  dlock__etcd_kvs_free(&kvs);
  return 1;
}
