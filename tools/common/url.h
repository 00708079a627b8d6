/*
 * url.h -- the Redis URLs the tools accept, parsed by the library's own
 * parser (src/proto/url.c is compiled into this layer), so a URL means the same
 * to the tools' plain hiredis connections as to the dlock client:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   unix:///path/to/socket[?db=N&password=...&user=...]
 *   redis-sentinel://[[user]:password@]h1:p1[,h2:p2...]/master[/db]
 *       [?sentinel_user=...&sentinel_password=...]
 *
 * plus the redaction used in messages and a hiredis connection to a URL.
 */
#ifndef DLOCK_COMMON_URL_H
#define DLOCK_COMMON_URL_H

#include <hiredis/hiredis.h>
#include <stddef.h>

typedef struct dlc_url {
  int is_unix;
  char *host; /* TCP */
  int port;
  char *path; /* unix */
  char *user, *password;
  int db;
  int cluster;  /* redis-cluster://: host/port is the first seed */
  int sentinel; /* redis-sentinel://: host and port are the master's once
                   dlc_redis_connect asked the sentinels (NULL / 0 here) */
} dlc_url;

/* 0, or -1 with the library's message ("malformed URL '...': why", the
 * password redacted) in err. dlc_url_free(u) either way. */
int dlc_url_parse(const char *url, dlc_url *u, char *err, size_t errlen);
void dlc_url_free(dlc_url *u);

/* url with its password replaced by "***" (user:***@, password=***). */
void dlc_url_redact(const char *url, char *buf, size_t len);

/* A blocking hiredis connection to url (connect timeout connect_s, then
 * command timeout cmd_s), AUTH and SELECT as the URL says. NULL after
 * writing why into err. */
redisContext *dlc_redis_connect(const char *url, int connect_s, int cmd_s,
                                char *err, size_t errlen);
/* The same, for commands on key: on a redis-cluster:// URL the connection
 * goes to the master serving key's slot (asked of the first seed); every
 * key the caller sends on it must share that slot (a hash tag). key NULL:
 * dlc_redis_connect. */
redisContext *dlc_redis_connect_key(const char *url, const char *key,
                                    int connect_s, int cmd_s, char *err,
                                    size_t errlen);

/* The same for one node of the URL's deployment (a cluster's master, as
 * CLUSTER SLOTS names it): host:port with the URL's credentials and db.
 * NULL after writing why into err. */
redisContext *dlc_redis_connect_node(const char *url, const char *host,
                                     int port, int connect_s, int cmd_s,
                                     char *err, size_t errlen);

#endif
