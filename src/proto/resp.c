/*
 * resp.c -- RESP on the way out and integers on the way back: a command's
 * argv encoded as a RESP array (dlock__resp_argv), and the integer answer
 * of a reply (dlock__reply_int, dlock__take_int). No connection: the
 * router, links, the background threads and both clients use them.
 */
#include <string.h>

#include "proto/proto.h"

/* RESP encoding of argv into b. hiredis's own formatter goes through sds
 * printf-style helpers and costs several thousand instructions per command;
 * this is a few hundred. */
void dlock__resp_argv(dlock__sb *b, int argc, const char **argv,
                      const size_t *lens) {
  dlock__sb_add(b, "*", 1);
  dlock__sb_addu64(b, (uint64_t)argc);
  dlock__sb_add(b, "\r\n", 2);
  for (int i = 0; i < argc; i++) {
    dlock__sb_add(b, "$", 1);
    dlock__sb_addu64(b, lens[i]);
    dlock__sb_add(b, "\r\n", 2);
    dlock__sb_add(b, argv[i], lens[i]);
    dlock__sb_add(b, "\r\n", 2);
  }
}

int dlock__take_int(int rc, redisReply *r, long long *v, int *nil) {
  if (nil)
    *nil = 0;
  if (rc || !r) {
    if (r)
      freeReplyObject(r);
    return rc ? rc : dlock__fail(DLOCK_EPROTO, "no reply");
  }
  if (nil && r->type == REDIS_REPLY_NIL) {
    *nil = 1;
    freeReplyObject(r);
    return 0;
  }
  rc = dlock__reply_int(r, v);
  freeReplyObject(r);
  return rc;
}

int dlock__reply_int(const redisReply *r, long long *v) {
  *v = 0;
  if (r && r->type == REDIS_REPLY_INTEGER) {
    *v = r->integer;
    return 0;
  }
  if (r && r->type == REDIS_REPLY_STRING) {
    char *end;
    *v = strtoll(r->str, &end, 10);
    if (end != r->str && *end == '\0')
      return 0;
  }
  return dlock__fail(DLOCK_EPROTO, "unexpected reply type %d",
                     r ? r->type : -1);
}
