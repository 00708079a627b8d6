/*
 * fuzz_url.c -- libFuzzer target: the URL parser (src/proto/url.c), which reads
 * every URL a program or the CLI passes in. Any byte string: parse, and on
 * success check the result's invariants -- per kind, as dlock__url
 * (proto/proto.h) describes them: a unix URL has an absolute path; a
 * redis(s):// URL a host and a port; a cluster URL its seeds (the first is
 * host/port); a sentinel URL its sentinels and a master name, and no host
 * (sentinel.c asks for the master); an etcd URL its endpoints, no host,
 * and a prefix that is empty or ends in '/' -- and free it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

static void check_host(const char *host, int port) {
  if (!host || !*host || port < 1 || port > 65535)
    abort();
}

static void check(const dlock__url *u) {
  if (u->db < 0 || u->db > DLOCK__DB_MAX)
    abort();
  if (u->is_unix + u->cluster + u->sentinel + u->etcd > 1)
    abort();
  if (u->etcd) {
    if (u->host || u->n_endpoints < 1 || !u->endpoints)
      abort();
    for (int i = 0; i < u->n_endpoints; i++)
      check_host(u->endpoints[i].host, u->endpoints[i].port);
    if (u->prefix && (!u->prefix[0] || u->prefix[strlen(u->prefix) - 1] != '/'))
      abort();
  } else if (u->is_unix) {
    if (!u->path || u->path[0] != '/' || u->host || u->tls)
      abort();
  } else if (u->sentinel) {
    if (u->host || u->n_sentinels < 1 || !u->sentinels || !u->master_name ||
        !*u->master_name)
      abort();
    for (int i = 0; i < u->n_sentinels; i++)
      check_host(u->sentinels[i].host, u->sentinels[i].port);
  } else if (u->cluster) {
    if (u->nseeds < 1 || u->db != 0)
      abort();
    for (int i = 0; i < u->nseeds; i++)
      check_host(u->seed_hosts[i], u->seed_ports[i]);
    check_host(u->host, u->port);
    if (strcmp(u->host, u->seed_hosts[0]) != 0 || u->port != u->seed_ports[0])
      abort();
  } else {
    check_host(u->host, u->port);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  dlock__url u;
  if (dlock__url_parse(s, &u) == 0) {
    check(&u);
    dlock__url_free(&u);
  }
  free(s);
  return 0;
}
