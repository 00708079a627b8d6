/*
 * url.c -- parses the two URL forms the client accepts:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://...  the same over TLS (link.c, tls.c)
 *   unix:///path/to/socket[?db=N&password=...&user=...]
 *   redis-cluster://[[user]:password@]host:port[,host:port...]  seed nodes
 *       of a Redis Cluster (cluster.c discovers the rest);
 *       rediss-cluster://... the same over TLS
 *   redis-sentinel://[[user]:password@]h1[:p1][,h2[:p2]...]/master[/db]
 *       [?sentinel_user=...&sentinel_password=...]  (sentinel.c; the
 *       sentinels' port defaults to 26379; rediss-sentinel:// over TLS)
 *   etcd://[user:password@]host[:port][,host[:port]...][/prefix][?tls=1]
 *       an etcd cluster (the etcd store, etcd_client.c; port 2379 by
 *       default; etcds:// or tls=1 over TLS)
 *
 * User and password may be percent-encoded. Every rejection names what is
 * wrong, because "invalid URL" alone sends people guessing.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  ch = tolower(ch);
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape (*bad
 * 1), a %00 (*bad 2: a NUL byte would end the string early -- "%001ed"
 * made a master name empty, issue 38) or OOM (*bad 0). */
static char *pct_decode(const char *s, size_t n, int *bad) {
  char *out = dlock__malloc(n + 1);
  size_t o = 0;
  *bad = 0;
  if (!out)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
      int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
      if (hi < 0 || lo < 0 || hi * 16 + lo == 0) {
        free(out);
        *bad = hi < 0 || lo < 0 ? 1 : 2;
        return NULL;
      }
      out[o++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

/* The words for a failed pct_decode of `what` (bad as it set). */
static const char *esc_why(int bad, const char *what, char *buf, size_t n) {
  if (bad == 2)
    snprintf(buf, n, "%%00 (a NUL byte) in the %s is refused", what);
  else
    snprintf(buf, n, "bad %%-escape in the %s", what);
  return buf;
}

/* Parses a non-negative decimal integer in [lo, hi]; -1 if not one. */
static long parse_num(const char *s, size_t n, long lo, long hi) {
  if (n == 0 || n > 9)
    return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i]))
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v < lo || v > hi ? -1 : v;
}

void dlock__url_free(dlock__url *u) {
  if (!u)
    return;
  free(u->host);
  free(u->path);
  free(u->user);
  free(u->password);
  for (int i = 0; i < u->nseeds; i++)
    free(u->seed_hosts[i]);
  free(u->seed_hosts);
  free(u->seed_ports);
  for (int i = 0; u->sentinels && i < u->n_sentinels; i++)
    free(u->sentinels[i].host);
  free(u->sentinels);
  free(u->master_name);
  free(u->sentinel_user);
  free(u->sentinel_password);
  for (int i = 0; u->endpoints && i < u->n_endpoints; i++)
    free(u->endpoints[i].host);
  free(u->endpoints);
  free(u->prefix);
  memset(u, 0, sizeof *u);
}

static int oom(dlock__url *u) {
  dlock__url_free(u);
  return dlock__fail(DLOCK_ENOMEM, "out of memory parsing the URL");
}

/* Every value of a password= (or sentinel_password=) query parameter in
 * url replaced by ***, into out. */
static void redact_query(const char *url, char *out, size_t cap) {
  const char *pw = strstr(url, "password=");
  size_t o = 0;
  const char *p = url;
  out[0] = '\0';
  while (pw && o < cap) {
    int w = snprintf(out + o, cap - o, "%.*spassword=***", (int)(pw - p), p);
    if (w < 0)
      break;
    o += (size_t)w;
    p = pw + 9;
    while (*p && *p != '&')
      p++;
    pw = strstr(p, "password=");
  }
  if (o < cap && snprintf(out + o, cap - o, "%s", p) < 0)
    out[o] = '\0';
}

/* The URL as it may appear in messages: the passwords replaced by ***.
 * The userinfo is taken to end at the last '@' before the query, not only
 * in the authority: a URL refused because its password holds an unencoded
 * '/' (so the authority ends inside the password) must not show it. */
static void redact(const char *url, char *out, size_t cap) {
  const char *rest = strstr(url, "://");
  const char *at = NULL;
  if (rest)
    for (const char *p = rest + 3; *p && *p != '?'; p++)
      if (*p == '@')
        at = p;
  const char *colon =
      at ? memchr(rest + 3, ':', (size_t)(at - rest - 3)) : NULL;
  char tmp[512];
  if (colon)
    snprintf(tmp, sizeof tmp, "%.*s:***%s", (int)(colon - url), url, at);
  else
    snprintf(tmp, sizeof tmp, "%s", url);
  redact_query(tmp, out, cap);
}

static int bad(dlock__url *u, const char *url, const char *what) {
  char shown[256];
  redact(url, shown, sizeof shown);
  dlock__url_free(u);
  return dlock__fail(DLOCK_EINVAL, "malformed URL '%s': %s", shown, what);
}

static int parse_unix(const char *url, const char *rest, dlock__url *u) {
  const char *q = strchr(rest, '?');
  size_t plen = q ? (size_t)(q - rest) : strlen(rest);
  if (plen == 0 || rest[0] != '/')
    return bad(u, url,
               "unix:// needs an absolute socket path "
               "(unix:///path/to/socket)");
  u->is_unix = 1;
  if (!(u->path = dlock__strndup(rest, plen)))
    return oom(u);
  if (!q)
    return 0;
  const char *p = q + 1;
  while (*p) {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    if (!eq)
      return bad(u, url, "query parameters must look like name=value");
    size_t nlen = (size_t)(eq - p);
    const char *v = eq + 1;
    size_t vlen = len - nlen - 1;
    int badesc = 0;
    char eb[80];
    if (nlen == 2 && memcmp(p, "db", 2) == 0) {
      long db = parse_num(v, vlen, 0, DLOCK__DB_MAX);
      if (db < 0)
        return bad(u, url, "db must be a non-negative integer");
      u->db = (int)db;
    } else if (nlen == 8 && memcmp(p, "password", 8) == 0) {
      free(u->password);
      if (!(u->password = pct_decode(v, vlen, &badesc)))
        return badesc ? bad(u, url, esc_why(badesc, "password", eb, sizeof eb))
                      : oom(u);
    } else if (nlen == 4 && memcmp(p, "user", 4) == 0) {
      free(u->user);
      if (!(u->user = pct_decode(v, vlen, &badesc)))
        return badesc ? bad(u, url, esc_why(badesc, "user", eb, sizeof eb))
                      : oom(u);
    } else {
      return bad(u, url,
                 "unknown query parameter (expected db, password or user)");
    }
    p += len;
    if (*p == '&')
      p++;
  }
  return 0;
}

/* The userinfo of the authority rest[0..alen): sets u->user / u->password
 * and *host (where the host part begins). 0 or a code (u freed). */
static int parse_userinfo(const char *url, const char *rest, size_t alen,
                          dlock__url *u, const char **host) {
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (rest[i] == '@')
      at = rest + i; /* the last '@' separates userinfo from the host */
  *host = rest;
  if (!at)
    return 0;
  int badesc = 0;
  char eb[80];
  const char *colon = memchr(rest, ':', (size_t)(at - rest));
  if (!colon)
    return bad(u, url, "credentials must be [user]:password@");
  if (colon > rest) {
    if (!(u->user = pct_decode(rest, (size_t)(colon - rest), &badesc)))
      return badesc ? bad(u, url, esc_why(badesc, "user", eb, sizeof eb))
                    : oom(u);
  }
  if (!(u->password = pct_decode(colon + 1, (size_t)(at - colon - 1), &badesc)))
    return badesc ? bad(u, url, esc_why(badesc, "password", eb, sizeof eb))
                  : oom(u);
  *host = at + 1;
  return 0;
}

/* host[:port] or [v6][:port] in host[0..hlen): *out (allocated) and *port
 * (def when absent). 0 or a code (u freed). */
static int parse_hostport(const char *url, const char *host, size_t hlen,
                          int def, dlock__url *u, char **out, int *port) {
  const char *ps = NULL;
  size_t hostlen;
  if (hlen > 0 && host[0] == '[') {
    const char *rb = memchr(host, ']', hlen);
    if (!rb)
      return bad(u, url, "unterminated [IPv6] host");
    if (!(*out = dlock__strndup(host + 1, (size_t)(rb - host - 1))))
      return oom(u);
    hostlen = (size_t)(rb - host - 1);
    if (rb + 1 < host + hlen) {
      if (rb[1] != ':')
        return bad(u, url, "junk after [IPv6] host");
      ps = rb + 2;
    }
  } else {
    const char *colon = memchr(host, ':', hlen);
    hostlen = colon ? (size_t)(colon - host) : hlen;
    if (!(*out = dlock__strndup(host, hostlen)))
      return oom(u);
    if (colon)
      ps = colon + 1;
  }
  if (hostlen == 0)
    return bad(u, url, "missing host");
  *port = def;
  if (ps) {
    long p = parse_num(ps, (size_t)(host + hlen - ps), 1, 65535);
    if (p < 0)
      return bad(u, url, "port must be a number from 1 to 65535");
    *port = (int)p;
  }
  return 0;
}

static int parse_tcp(const char *url, const char *rest, dlock__url *u) {
  /* Authority ends at the first '/' (db) -- but the password may contain
   * '/' only percent-encoded, as in every URL. */
  const char *slash = strchr(rest, '/');
  size_t alen = slash ? (size_t)(slash - rest) : strlen(rest);
  const char *host;
  int rc = parse_userinfo(url, rest, alen, u, &host);
  if (rc || (rc = parse_hostport(url, host, (size_t)(rest + alen - host), 6379,
                                 u, &u->host, &u->port)) != 0)
    return rc;
  if (slash && slash[1]) {
    long db = parse_num(slash + 1, strlen(slash + 1), 0, DLOCK__DB_MAX);
    if (db < 0)
      return bad(u, url,
                 "database (after '/') must be a non-negative "
                 "integer");
    u->db = (int)db;
  }
  return 0;
}

/* redis-cluster://[[user]:password@]h:p[,h:p...][/0]: each seed is parsed
 * as the redis:// URL "redis://<userinfo>@h:p", so host and port follow
 * the same rules and messages. */
static int parse_cluster(const char *url, const char *rest, dlock__url *u) {
  const char *slash = strchr(rest, '/');
  size_t alen = slash ? (size_t)(slash - rest) : strlen(rest);
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (rest[i] == '@')
      at = rest + i;
  if (slash && slash[1] && strcmp(slash + 1, "0") != 0)
    return bad(u, url, "a cluster has only database 0");
  const char *hosts = at ? at + 1 : rest;
  size_t ulen = at ? (size_t)(at + 1 - rest) : 0;
  int n = 1;
  for (const char *p = hosts; p < rest + alen; p++)
    n += *p == ',';
  if (n > 64)
    return bad(u, url, "more than 64 seed nodes");
  u->cluster = 1;
  if (!(u->seed_hosts = dlock__calloc((size_t)n, sizeof *u->seed_hosts)) ||
      !(u->seed_ports = dlock__calloc((size_t)n, sizeof *u->seed_ports)))
    return oom(u);
  const char *p = hosts;
  for (int i = 0; i < n; i++) {
    const char *comma = memchr(p, ',', (size_t)(rest + alen - p));
    size_t hl = comma ? (size_t)(comma - p) : (size_t)(rest + alen - p);
    if (hl == 0)
      return bad(u, url, "empty seed node in the list");
    char one[512];
    int w = snprintf(one, sizeof one, "redis://%.*s%.*s", (int)ulen, rest,
                     (int)hl, p);
    if (w < 0 || (size_t)w >= sizeof one)
      return bad(u, url, "seed node too long");
    dlock__url s;
    memset(&s, 0, sizeof s);
    if (parse_tcp(one, one + 8, &s) != 0) {
      dlock__url_free(u);
      return DLOCK_EINVAL; /* parse_tcp's message names the seed */
    }
    if (i == 0) {
      u->user = s.user;
      u->password = s.password;
      u->host = dlock__strdup(s.host);
      u->port = s.port;
      s.user = s.password = NULL;
    }
    u->seed_hosts[i] = s.host;
    u->seed_ports[i] = s.port;
    s.host = NULL;
    u->nseeds = i + 1;
    dlock__url_free(&s);
    if (!u->host)
      return oom(u);
    p += hl + 1;
  }
  return 0;
}

/* The sentinels h1[:p1],h2[:p2]... of list[0..n) (default port 26379). */
static int parse_sentinels(const char *url, const char *list, size_t n,
                           dlock__url *u) {
  int count = 1;
  for (size_t i = 0; i < n; i++)
    count += list[i] == ',';
  size_t bytes = (size_t)count * sizeof *u->sentinels;
  if (!(u->sentinels = dlock__malloc(bytes)))
    return oom(u);
  memset(u->sentinels, 0, bytes);
  u->n_sentinels = count;
  const char *p = list, *end = list + n;
  for (int i = 0; i < count; i++) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *e = comma ? comma : end;
    int rc = parse_hostport(url, p, (size_t)(e - p), 26379, u,
                            &u->sentinels[i].host, &u->sentinels[i].port);
    if (rc)
      return rc;
    p = e + 1;
  }
  return 0;
}

/* ?sentinel_user=...&sentinel_password=... */
static int parse_sentinel_query(const char *url, const char *q, dlock__url *u) {
  for (const char *p = q; *p;) {
    size_t len = strcspn(p, "&");
    const char *eq = memchr(p, '=', len);
    if (!eq)
      return bad(u, url, "query parameters must look like name=value");
    size_t nlen = (size_t)(eq - p), vlen = len - nlen - 1;
    char **dst = nlen == 13 && memcmp(p, "sentinel_user", 13) == 0
                     ? &u->sentinel_user
                 : nlen == 17 && memcmp(p, "sentinel_password", 17) == 0
                     ? &u->sentinel_password
                     : NULL;
    if (!dst)
      return bad(u, url,
                 "unknown query parameter (expected sentinel_user or "
                 "sentinel_password)");
    int badesc = 0;
    char eb[80];
    free(*dst);
    if (!(*dst = pct_decode(eq + 1, vlen, &badesc)))
      return badesc ? bad(u, url,
                          esc_why(badesc, "query parameter", eb, sizeof eb))
                    : oom(u);
    p += len + (p[len] == '&');
  }
  return 0;
}

/* redis-sentinel://[[user]:password@]h1[:p1][,h2[:p2]...]/master[/db]
 * [?sentinel_user=...&sentinel_password=...] */
static int parse_sentinel(const char *url, const char *rest, dlock__url *u) {
  u->sentinel = 1;
  const char *slash = strchr(rest, '/');
  if (!slash)
    return bad(u, url, "missing /master-name after the sentinel addresses");
  const char *host;
  int rc = parse_userinfo(url, rest, (size_t)(slash - rest), u, &host);
  if (rc || (rc = parse_sentinels(url, host, (size_t)(slash - host), u)) != 0)
    return rc;
  const char *path = slash + 1;
  const char *q = strchr(path, '?');
  size_t plen = q ? (size_t)(q - path) : strlen(path);
  const char *s2 = memchr(path, '/', plen);
  size_t mlen = s2 ? (size_t)(s2 - path) : plen;
  int badesc = 0;
  char eb[80];
  if (mlen == 0)
    return bad(u, url, "missing master name (redis-sentinel://host:port/name)");
  /* The userinfo comes before the first '/': an '@' after it is a password
   * with an unencoded '/' (its tail would become the master name and show
   * in messages), or a master name that needs %40. */
  if (memchr(path, '@', plen))
    return bad(u, url,
               "'@' after the sentinel addresses: credentials go before "
               "them ('/' in a password is written %2F, '@' in a master "
               "name %40)");
  if (!(u->master_name = pct_decode(path, mlen, &badesc)))
    return badesc ? bad(u, url, esc_why(badesc, "master name", eb, sizeof eb))
                  : oom(u);
  if (s2 && s2 + 1 < path + plen) {
    long db =
        parse_num(s2 + 1, (size_t)(path + plen - s2 - 1), 0, DLOCK__DB_MAX);
    if (db < 0)
      return bad(u, url,
                 "database (after the master name) must be a non-negative "
                 "integer");
    u->db = (int)db;
  }
  return q ? parse_sentinel_query(url, q + 1, u) : 0;
}

/* The query of an etcd URL: tls=1 or tls=0. 0 or a code (u freed). */
static int parse_etcd_query(const char *url, const char *q, dlock__url *u) {
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    if (len == 5 && (memcmp(q, "tls=1", 5) == 0 || memcmp(q, "tls=0", 5) == 0))
      u->etcd_tls = u->etcd_tls == 2 ? 2 : q[4] == '1';
    else
      return bad(u, url, "unknown query parameter (expected tls=1 or tls=0)");
    q += len + (amp ? 1 : 0);
  }
  return 0;
}

/* etcd://[user:password@]h[:p][,h[:p]...][/prefix][?tls=1]: the endpoints
 * (tried in turn), the key prefix (percent-decoded; a '/' is appended
 * when it does not end in one), the query. tls: 2 for etcds:// (a tls=0
 * cannot turn it off). 0 or a code (u freed). */
static int parse_etcd(const char *url, const char *rest, int tls,
                      dlock__url *u) {
  const char *q = strchr(rest, '?');
  size_t rlen = q ? (size_t)(q - rest) : strlen(rest);
  const char *slash = memchr(rest, '/', rlen);
  size_t alen = slash ? (size_t)(slash - rest) : rlen;
  const char *host;
  int rc = parse_userinfo(url, rest, alen, u, &host);
  if (rc)
    return rc;
  u->etcd = 1;
  u->etcd_tls = tls;
  const char *end = rest + alen;
  int n = 1;
  for (const char *p = host; p < end; p++)
    n += *p == ',';
  if (n > 64)
    return bad(u, url, "at most 64 etcd endpoints");
  if (!(u->endpoints = dlock__calloc((size_t)n, sizeof *u->endpoints)))
    return oom(u);
  for (const char *p = host;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    size_t hl = comma ? (size_t)(comma - p) : (size_t)(end - p);
    if (hl == 0)
      return bad(u, url, "empty endpoint (etcd://host:port,host:port...)");
    dlock__hostport *e = &u->endpoints[u->n_endpoints++];
    if ((rc = parse_hostport(url, p, hl, 2379, u, &e->host, &e->port)) != 0)
      return rc;
    if (!comma)
      break;
    p = comma + 1;
  }
  if (slash && slash + 1 < rest + rlen) {
    int badesc = 0;
    char eb[80];
    size_t pl = rlen - alen - 1;
    char *pre = pct_decode(slash + 1, pl, &badesc);
    if (!pre)
      return badesc ? bad(u, url, esc_why(badesc, "prefix", eb, sizeof eb))
                    : oom(u);
    size_t dl = strlen(pre);
    if (!(u->prefix = dlock__malloc(dl + 2))) {
      free(pre);
      return oom(u);
    }
    memcpy(u->prefix, pre, dl + 1);
    if (pre[dl - 1] != '/')
      memcpy(u->prefix + dl, "/", 2);
    free(pre);
  }
  return q ? parse_etcd_query(url, q + 1, u) : 0;
}

int dlock__url_parse(const char *url, dlock__url *u) {
  memset(u, 0, sizeof *u);
  if (!url || !*url)
    return dlock__fail(DLOCK_EINVAL, "empty URL");
  if (strncmp(url, "redis://", 8) == 0)
    return parse_tcp(url, url + 8, u);
  if (strncmp(url, "unix://", 7) == 0)
    return parse_unix(url, url + 7, u);
  if (strncmp(url, "redis-cluster://", 16) == 0)
    return parse_cluster(url, url + 16, u);
  if (strncmp(url, "rediss-cluster://", 17) == 0) {
    int rc = parse_cluster(url, url + 17, u);
    u->tls = rc == 0;
    return rc;
  }
  if (strncmp(url, "redis-sentinel://", 17) == 0)
    return parse_sentinel(url, url + 17, u);
  if (strncmp(url, "rediss-sentinel://", 18) == 0) {
    u->tls = 1;
    int rc = parse_sentinel(url, url + 18, u);
    u->tls = rc == 0;
    return rc;
  }
  if (strncmp(url, "rediss://", 9) == 0) {
    u->tls = 1;
    int rc = parse_tcp(url, url + 9, u);
    u->tls = rc == 0;
    return rc;
  }
  if (strncmp(url, "etcd://", 7) == 0)
    return parse_etcd(url, url + 7, 0, u);
  if (strncmp(url, "etcds://", 8) == 0)
    return parse_etcd(url, url + 8, 2, u);
  return bad(u, url,
             "unknown scheme (expected redis://, rediss://, unix://, "
             "redis-cluster://, redis-sentinel:// or etcd://)");
}
