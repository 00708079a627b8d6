/*
 * rm_parse.c -- numbers as Redis 7.0 reads and writes them, for the Redis
 * model (rm_int.h): strict integers (string2ll: no spaces, no '+', no
 * leading zeros, at most 20 characters), the integer arguments' error
 * replies (their texts and which one a command gives), doubles (strtod
 * over the whole argument, no leading space, no NaN), and the "%.17g" text
 * of a double reply and of a Lua number passed to redis.call.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

int rm_str2ll(const char *p, size_t n, long long *v) {
  if (n == 0 || n >= 21)
    return 0;
  if (n == 1 && p[0] == '0') {
    *v = 0;
    return 1;
  }
  size_t i = 0;
  int neg = 0;
  if (p[0] == '-') {
    neg = 1;
    i++;
    if (i == n)
      return 0;
  }
  if (p[i] < '1' || p[i] > '9')
    return 0;
  unsigned long long u = (unsigned long long)(p[i] - '0');
  for (i++; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return 0;
    unsigned d = (unsigned)(p[i] - '0');
    if (u > ULLONG_MAX / 10)
      return 0;
    u *= 10;
    if (u > ULLONG_MAX - d)
      return 0;
    u += d;
  }
  if (neg) {
    if (u > (unsigned long long)LLONG_MAX + 1)
      return 0;
    *v = u == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)u;
  } else {
    if (u > (unsigned long long)LLONG_MAX)
      return 0;
    *v = (long long)u;
  }
  return 1;
}

int rm_get_ll(rm_ctx *c, rm_arg a, long long *v) {
  if (rm_str2ll(a.p, a.len, v))
    return 0;
  rm_out_error(c, "ERR value is not an integer or out of range");
  return -1;
}

int rm_get_range_ll(rm_ctx *c, rm_arg a, long long min, long long max,
                    long long *v, const char *msg) {
  if (!rm_str2ll(a.p, a.len, v)) {
    rm_out_error(c, "ERR %s",
                 msg ? msg : "value is not an integer or out of range");
    return -1;
  }
  if (*v < min || *v > max) {
    if (msg)
      rm_out_error(c, "ERR %s", msg);
    else
      rm_out_error(c,
                   "ERR value is out of range, value must between %lld "
                   "and %lld",
                   min, max);
    return -1;
  }
  return 0;
}

int rm_get_positive(rm_ctx *c, rm_arg a, long long *v, const char *msg) {
  return rm_get_range_ll(c, a, 0, LLONG_MAX, v,
                         msg ? msg : "value is out of range, must be positive");
}

int rm_str2d(const char *p, size_t n, double *v) {
  char stack[64];
  char *buf = n < sizeof stack ? stack : rm_xmalloc(n + 1);
  memcpy(buf, p, n);
  buf[n] = '\0';
  errno = 0;
  char *end = NULL;
  double d = strtod(buf, &end);
  int ok =
      !(n == 0 || isspace((unsigned char)buf[0]) || (size_t)(end - buf) != n ||
        (errno == ERANGE &&
         (d == HUGE_VAL || d == -HUGE_VAL || fpclassify(d) == FP_ZERO)) ||
        isnan(d));
  if (buf != stack)
    free(buf);
  if (ok)
    *v = d;
  return ok ? 0 : -1;
}

size_t rm_fmt_double(char *buf, double d) {
  if (isinf(d)) {
    size_t n = d > 0 ? 3 : 4;
    memcpy(buf, d > 0 ? "inf" : "-inf", n + 1);
    return n;
  }
  return (size_t)snprintf(buf, 32, "%.17g", d);
}

size_t rm_fmt_lua_number(char *buf, double d) {
  return (size_t)snprintf(buf, 64, "%.17g", d);
}
