/*
 * names.c -- the names of keys, channels and hash fields: Redisson's
 * prefix/suffix rules, dlock's own unambiguous form, unlock latch keys,
 * "<id>:<owner>" fields, the tags of a Cluster client's info key copies,
 * a key's Cluster slot (CRC16 of its hash tag), and the lease bound every
 * entry point checks. (The client's own "<uuid>:<tid>" field,
 * dlock__field, is client/client.c's.)
 */
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"

/* prefix ":{" name "}" for a name without '{'; prefix sep name for one with
 * (sep ":" is Redisson's rule, "::" dlock's unambiguous one). */
static void tagged(dlock__sb *b, const char *prefix, const char *sep,
                   const char *name) {
  dlock__sb_adds(b, prefix);
  if (strchr(name, '{')) {
    dlock__sb_adds(b, sep);
    dlock__sb_adds(b, name);
  } else {
    dlock__sb_add(b, ":{", 2);
    dlock__sb_adds(b, name);
    dlock__sb_add(b, "}", 1);
  }
}

void dlock__prefix_name(dlock__sb *b, const char *prefix, const char *name) {
  tagged(b, prefix, ":", name);
}

void dlock__own_name(dlock__sb *b, const char *prefix, const char *name) {
  tagged(b, prefix, "::", name);
}

int dlock__own_name_back(const char *prefix, const char *key, size_t len,
                         dlock__sb *name) {
  size_t pl = strlen(prefix);
  if (len < pl + 1 || memcmp(key, prefix, pl) != 0 || key[pl] != ':')
    return -1;
  const char *r = key + pl + 1;
  size_t rl = len - pl - 1;
  if (rl >= 2 && r[0] == ':' && memchr(r + 1, '{', rl - 1))
    dlock__sb_add(name, r + 1, rl - 1);
  else if (rl >= 2 && r[0] == '{' && r[rl - 1] == '}' &&
           !memchr(r + 1, '{', rl - 2))
    dlock__sb_add(name, r + 1, rl - 2);
  else
    return -1;
  return name->oom ? -1 : 0;
}

void dlock__unlock_latch_key(dlock__sb *b, const char *name, const char *rid) {
  dlock__prefix_name(b, "redisson_unlock_latch", name);
  dlock__sb_add(b, ":", 1);
  dlock__sb_add(b, rid, 32);
}

void dlock__suffix_name(dlock__sb *b, const char *name, const char *suffix) {
  if (strchr(name, '{')) {
    dlock__sb_adds(b, name);
    dlock__sb_add(b, ":", 1);
  } else {
    dlock__sb_add(b, "{", 1);
    dlock__sb_adds(b, name);
    dlock__sb_add(b, "}:", 2);
  }
  dlock__sb_adds(b, suffix);
}

size_t dlock__field_owner(const char *id, long long owner, char *buf) {
  memcpy(buf, id, DLOCK__UUID_LEN);
  buf[DLOCK__UUID_LEN] = ':';
  return DLOCK__UUID_LEN + 1 + dlock__fmt_i64(buf + DLOCK__UUID_LEN + 1, owner);
}

int dlock__check_lease(long long lease_ms, const char *what, const char *name) {
  if (lease_ms <= DLOCK_LEASE_MAX_MS)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s '%s': lease %lld ms is longer than the longest "
                     "accepted (DLOCK_LEASE_MAX_MS, %lld ms)",
                     what, name, lease_ms, DLOCK_LEASE_MAX_MS);
}

int dlock__info_copy_tags(int own, int want,
                          int (*owner_of)(const void *map, unsigned slot),
                          const void *map, char (*tags)[8], int max) {
  char done[DLOCK__CLUSTER_MAX_NODES] = {0};
  if (own >= 0 && own < DLOCK__CLUSTER_MAX_NODES)
    done[own] = 1; /* the key itself lives there */
  int k = 0;
  /* a few tries per master: the slots are spread */
  for (unsigned t = 0; t < 4096 && k < want && k < max; t++) {
    char tag[8];
    int tl = snprintf(tag, sizeof tag, "%x", t);
    int o = owner_of(map, dlock__key_slot(tag, (size_t)tl));
    if (o < 0 || o >= DLOCK__CLUSTER_MAX_NODES || done[o])
      continue;
    done[o] = 1;
    memcpy(tags[k++], tag, (size_t)tl + 1);
  }
  return k;
}

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum
 * Redis Cluster hashes keys with, computed a byte at a time. */
static uint16_t crc16(const char *p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)((unsigned char)p[i] << 8);
    for (int b = 0; b < 8; b++)
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                           : (uint16_t)(crc << 1);
  }
  return crc;
}

/* The part of key that is hashed: between the first '{' and the first '}'
 * after it, when that is not empty; else the whole key. */
void dlock__hash_part(const char *key, size_t len, const char **p, size_t *n) {
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) {
      *p = open + 1;
      *n = (size_t)(close - open - 1);
      return;
    }
  }
  *p = key;
  *n = len;
}

unsigned dlock__key_slot(const char *key, size_t len) {
  const char *p;
  size_t n;
  dlock__hash_part(key, len, &p, &n);
  return crc16(p, n) & (DLOCK__SLOTS - 1);
}
