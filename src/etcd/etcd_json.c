/*
 * etcd_json.c -- the etcd store's JSON and key layout: what the v3 gateway
 * (etcd 3.4's grpc-gateway) wants and answers, and nothing else.
 *
 * THE GATEWAY'S JSON. Keys and values are base64 (OpenSSL's codec); every
 * int64 travels as a string ("revision":"2"); a field at its default value
 * is left out of an answer (succeeded:false, TTL 0, an empty kvs). Request
 * bodies are written here by hand into a dlock__sb (one allocation, no
 * object tree); answers are read with json-c, whose int64 getter parses the
 * quoted numbers.
 *
 * THE KEY LAYOUT (docs/etcd.md). A lock `name` of a client with URL prefix
 * P is the set of keys P<name>/<lease hex>: one per client that holds or
 * waits, each under that client's session lease -- exactly the keys of
 * `etcdctl lock P<name>` and Go's concurrency.Mutex, so they exclude each
 * other. The holder is the key with the lowest create revision. A name's
 * range is P<name>/ up to P<name>0 ('0' follows '/'); a key of that range
 * with another '/' after the name's belongs to a longer name ("a/b" is not
 * a waiter of "a") and is skipped.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "etcd/etcd_int.h"

void dlock__etcd_b64(dlock__sb *b, const char *p, size_t n) {
  size_t need = 4 * ((n + 2) / 3) + 1;
  char stack[512];
  char *out = need <= sizeof stack ? stack : dlock__malloc(need);
  if (!out) {
    b->oom = 1;
    return;
  }
  int w =
      EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)p, (int)n);
  dlock__sb_add(b, out, w > 0 ? (size_t)w : 0);
  if (out != stack)
    free(out);
}

int dlock__etcd_unb64(const char *s, dlock__sb *out) {
  dlock__sb_reset(out);
  size_t n = strlen(s);
  if (n % 4)
    return -1;
  if (n == 0)
    return 0;
  char stack[512];
  char *buf = n <= sizeof stack ? stack : dlock__malloc(n);
  if (!buf)
    return -1;
  int w =
      EVP_DecodeBlock((unsigned char *)buf, (const unsigned char *)s, (int)n);
  if (w >= 0) {
    /* EVP_DecodeBlock counts the padding's zero bytes: take them off */
    if (n >= 1 && s[n - 1] == '=')
      w--;
    if (n >= 2 && s[n - 2] == '=')
      w--;
    dlock__sb_add(out, buf, (size_t)w);
  }
  if (buf != stack)
    free(buf);
  return w < 0 || out->oom ? -1 : 0;
}

void dlock__etcd_jint(dlock__sb *b, int64_t v) {
  dlock__sb_add(b, "\"", 1);
  dlock__sb_addi64(b, v);
  dlock__sb_add(b, "\"", 1);
}

json_object *dlock__etcd_get(json_object *o, const char *k) {
  json_object *v = NULL;
  if (!o || !json_object_is_type(o, json_type_object) ||
      !json_object_object_get_ex(o, k, &v))
    return NULL;
  return v;
}

int64_t dlock__etcd_int(json_object *o, const char *k) {
  json_object *v = dlock__etcd_get(o, k);
  if (!v)
    return 0;
  if (json_object_is_type(v, json_type_string)) {
    const char *s = json_object_get_string(v);
    char *end = NULL;
    long long x = strtoll(s, &end, 10);
    return end && end != s && *end == '\0' ? (int64_t)x : 0;
  }
  return json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

int64_t dlock__etcd_rev(json_object *o) {
  return dlock__etcd_int(dlock__etcd_get(o, "header"), "revision");
}

void dlock__etcd_key(const dlock__etcd *e, dlock__sb *b, const char *name,
                     int64_t lease) {
  static const char hx[] = "0123456789abcdef";
  char hex[17];
  int n = 0;
  uint64_t v = (uint64_t)lease;
  /* %x of the lease id: no leading zeros (Go's fmt "%x") */
  char tmp[16];
  do {
    tmp[n++] = hx[v & 15];
    v >>= 4;
  } while (v);
  for (int i = 0; i < n; i++)
    hex[i] = tmp[n - 1 - i];
  dlock__sb_reset(b);
  dlock__sb_add(b, e->prefix, e->prefix_len);
  dlock__sb_adds(b, name);
  dlock__sb_add(b, "/", 1);
  dlock__sb_add(b, hex, (size_t)n);
}

void dlock__etcd_range(const dlock__etcd *e, dlock__sb *from, dlock__sb *to,
                       const char *name) {
  dlock__sb_reset(from);
  dlock__sb_add(from, e->prefix, e->prefix_len);
  dlock__sb_adds(from, name);
  dlock__sb_add(from, "/", 1);
  dlock__sb_reset(to);
  dlock__sb_add(to, from->p, from->len - 1);
  dlock__sb_add(to, "0", 1);
}

void dlock__etcd_kvs_free(dlock__etcd_kvs *k) {
  for (size_t i = 0; k->v && i < k->n; i++) {
    free(k->v[i].key);
    free(k->v[i].value);
  }
  free(k->v);
  k->v = NULL;
  k->n = 0;
}

/* A decoded copy of base64 field `f` of kv into *out (length *len). */
static int take_b64(json_object *kv, const char *f, char **out, size_t *len) {
  json_object *j = dlock__etcd_get(kv, f);
  const char *s = j ? json_object_get_string(j) : "";
  dlock__sb b;
  dlock__sb_init(&b);
  int rc = dlock__etcd_unb64(s ? s : "", &b);
  if (rc == 0 && !(*out = dlock__strndup(b.p ? b.p : "", b.len)))
    rc = -2;
  *len = b.len;
  dlock__sb_free(&b);
  return rc;
}

/* 1 when key[0..klen) is a lock key of range start `from`: from, then one
 * segment without '/'. */
static int one_segment(const char *key, size_t klen, const dlock__sb *from) {
  if (klen <= from->len || memcmp(key, from->p, from->len) != 0)
    return 0;
  return memchr(key + from->len, '/', klen - from->len) == NULL;
}

int dlock__etcd_kvs_parse(json_object *r, const dlock__sb *from,
                          dlock__etcd_kvs *out) {
  out->v = NULL;
  out->n = 0;
  json_object *kvs = dlock__etcd_get(r, "kvs");
  size_t m = kvs && json_object_is_type(kvs, json_type_array)
                 ? json_object_array_length(kvs)
                 : 0;
  if (m == 0)
    return 0;
  if (!(out->v = dlock__calloc(m, sizeof *out->v)))
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; i < m; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    dlock__etcd_kv *d = &out->v[out->n];
    int rc = take_b64(kv, "key", &d->key, &d->klen);
    if (rc == 0)
      rc = take_b64(kv, "value", &d->value, &d->vlen);
    if (rc) {
      free(d->key);
      free(d->value);
      d->key = d->value = NULL;
      dlock__etcd_kvs_free(out);
      return rc == -2 ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                      : dlock__fail(DLOCK_EPROTO,
                                    "etcd answered a key or value that is not "
                                    "base64");
    }
    if (from && !one_segment(d->key, d->klen, from)) {
      free(d->key);
      free(d->value);
      d->key = d->value = NULL; /* the slot is used again */
      continue;
    }
    d->create = dlock__etcd_int(kv, "create_revision");
    d->mod = dlock__etcd_int(kv, "mod_revision");
    d->lease = dlock__etcd_int(kv, "lease");
    d->version = dlock__etcd_int(kv, "version");
    out->n++;
  }
  return 0;
}
