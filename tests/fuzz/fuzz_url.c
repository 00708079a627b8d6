/*
 * fuzz_url.c -- libFuzzer target: the URL parser (src/url.c), which reads
 * every URL a program or the CLI passes in. Any byte string: parse, and on
 * success check the result's invariants and free it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  dlock__url u;
  if (dlock__url_parse(s, &u) == 0) {
    if (u.is_unix ? !u.path : !u.host)
      abort();
    if (u.db < 0 || u.db > DLOCK__DB_MAX)
      abort();
    if (!u.is_unix && (u.port < 0 || u.port > 65535))
      abort();
    dlock__url_free(&u);
  }
  free(s);
  return 0;
}
