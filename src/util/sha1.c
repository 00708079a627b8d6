/*
 * sha1.c -- SHA-1 (FIPS 180-1), used only for the digests EVALSHA names
 * scripts by.
 */
#include <string.h>

#include "util/util.h"

static const char hexdig[] = "0123456789abcdef";

/* ---- SHA1 (FIPS 180-1), only for script digests ------------------------ */

static uint32_t rol32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
  uint32_t w[80];
  for (size_t i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 80; i++)
    w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int i = 0; i < 80; i++) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999u;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1u;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDCu;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6u;
    }
    uint32_t t = rol32(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rol32(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void dlock__sha1_hex(const char *data, size_t len, char out[41]) {
  uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u,
                   0xC3D2E1F0u};
  const unsigned char *p = (const unsigned char *)data;
  size_t left = len;
  while (left >= 64) {
    sha1_block(h, p);
    p += 64;
    left -= 64;
  }
  unsigned char tail[128];
  memset(tail, 0, sizeof tail);
  memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tl = left + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++)
    tail[tl - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha1_block(h, tail);
  if (tl == 128)
    sha1_block(h, tail + 64);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++) {
      unsigned v = (h[i] >> (24 - 8 * j)) & 0xff;
      out[i * 8 + j * 2] = hexdig[v >> 4];
      out[i * 8 + j * 2 + 1] = hexdig[v & 15];
    }
  out[40] = '\0';
}
