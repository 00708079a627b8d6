/*
 * random.c -- randomness: getrandom(2) bytes, a fast per-thread PRNG
 * (reseeded in fork children), client UUIDs and request ids.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util/util.h"

/* ---- randomness --------------------------------------------------------- */

int dlock__random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static _Thread_local uint64_t t_rng[2];

void dlock__rand_reset_thread(void) {
  t_rng[0] = 0;
  t_rng[1] = 0;
}

uint64_t dlock__rand64(void) {
  /* xorshift128+, seeded once per thread from the kernel. */
  if (t_rng[0] == 0 && t_rng[1] == 0) {
    if (dlock__random_bytes(t_rng, sizeof t_rng) != 0 ||
        (t_rng[0] == 0 && t_rng[1] == 0)) {
      t_rng[0] = (uint64_t)dlock__now_us() | 1;
      t_rng[1] = (uint64_t)(uintptr_t)&t_rng;
    }
  }
  uint64_t s1 = t_rng[0];
  const uint64_t s0 = t_rng[1];
  t_rng[0] = s0;
  s1 ^= s1 << 23;
  t_rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
  return t_rng[1] + s0;
}

static const char hexdig[] = "0123456789abcdef";

void dlock__uuid4(char out[DLOCK__UUID_LEN + 1]) {
  unsigned char b[16];
  if (dlock__random_bytes(b, sizeof b) != 0) {
    uint64_t x = dlock__rand64(), y = dlock__rand64();
    memcpy(b, &x, 8);
    memcpy(b + 8, &y, 8);
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  char *o = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      *o++ = '-';
    *o++ = hexdig[b[i] >> 4];
    *o++ = hexdig[b[i] & 15];
  }
  *o = '\0';
}

/* Request ids are drawn by the engine (engine.c dlock__request_id). */
