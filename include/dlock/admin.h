/*
 * dlock/admin.h -- reads for operators' tools (since 0.3): which masters a
 * client's URL reaches, and read-only commands on one of them, pipelined,
 * each call bounded by a deadline. `dlock list`, `dlock top`, `dlock
 * status` and `dlock exporter` are built on it (docs/operations.md): a tool
 * gets the client's URL forms and settings -- redis://, unix://, rediss://
 * with its CA, mutual TLS, ACL users, a config file's passwords,
 * redis-sentinel:// (the master the sentinels name now), redis-cluster://
 * (every master) -- without a connection code of its own, and one master
 * that does not answer costs a tool that master, not the others.
 *
 *   dlock_admin *a;
 *   dlock_admin_new(c, &a);                 (c: a dlock_client, borrowed)
 *   char **nodes; size_t n;
 *   dlock_admin_nodes(a, &nodes, &n);       ("10.0.0.5:6379", ...)
 *   const char *scan[] = {"SCAN", "0", "COUNT", "1000"};
 *   dlock_admin_cmd cmd = {4, scan, NULL};
 *   dlock_reply *r;
 *   if (dlock_admin_run(a, nodes[0], &cmd, 1, 2000, &r) == DLOCK_OK) {
 *     ... r->element[1]->element[i]->str ...
 *     dlock_reply_free(r);
 *   }
 *   dlock_admin_nodes_free(nodes, n);
 *   dlock_admin_free(a);
 *
 * The connections: an admin object opens its own connections to each
 * master (one per concurrent call, kept for the next call), with the
 * client's settings -- TLS context, credentials, connection name, connect
 * timeout -- and closes them in dlock_admin_free. It never uses the
 * client's lock connections, so a scan never delays a lock call.
 *
 * Replies are copies (struct dlock_reply below), not hiredis objects: this
 * header needs no other library's header, and the layout is the library's
 * own, frozen like dlock_holder.
 */
#ifndef DLOCK_ADMIN_H
#define DLOCK_ADMIN_H

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dlock_reply.type (the numbers are RESP2's kinds as hiredis names them). */
#define DLOCK_REPLY_STRING 1  /* a bulk string: str, len */
#define DLOCK_REPLY_ARRAY 2   /* element[0..elements) */
#define DLOCK_REPLY_INTEGER 3 /* integer */
#define DLOCK_REPLY_NIL 4     /* a missing value */
#define DLOCK_REPLY_STATUS 5  /* "+OK": str, len */
#define DLOCK_REPLY_ERROR 6   /* the server refused the command: str, len */

/* One reply, owned by the caller (dlock_reply_free frees it and every
 * element). str is NUL-terminated and may hold NUL bytes (use len); it is
 * NULL for the kinds without one. Frozen layout. */
typedef struct dlock_reply {
  int type;
  long long integer;
  size_t len;
  char *str;
  size_t elements;
  struct dlock_reply **element;
} dlock_reply;

/* One command of a pipeline: argv[0..argc), each argvlen[i] bytes long
 * (argvlen NULL: each argv[i] is a NUL-terminated string). Borrowed for
 * the call. */
typedef struct dlock_admin_cmd {
  int argc;
  const char *const *argv;
  const size_t *argvlen;
} dlock_admin_cmd;

typedef struct dlock_admin dlock_admin;

/* An admin object on client c (borrowed: it must outlive the object; any
 * Redis URL form). No I/O. Errors: DLOCK_EINVAL (NULL), DLOCK_EFORK,
 * DLOCK_ECLOSED, DLOCK_ENOTSUP (an etcd:// client: there is no Redis
 * keyspace to read; dlock_status_query and dlock_fair_waiters_query read
 * etcd), DLOCK_ENOMEM. Ownership: *out is the caller's
 * (dlock_admin_free). Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_admin_new(dlock_client *c, dlock_admin **out);

/* Closes the object's connections and frees it. NULL accepted.
 * Thread-safety: no call on a may be running (a call another thread
 * abandoned must have returned). */
DLOCK_SINCE(0, 3)
DLOCK_API void dlock_admin_free(dlock_admin *a);

/* The masters the client's URL reaches now, as "host:port" (a unix socket:
 * its path): the server of a redis:// or unix:// URL; for
 * redis-sentinel:// the master the sentinels name now (asked when not
 * known); for redis-cluster:// every master that serves slots, after
 * asking the cluster for its slot map again (a master that stopped
 * answering stays listed until the cluster replaces it). *nodes gets a
 * malloc'd array of *n malloc'd strings, the caller's: free it with
 * dlock_admin_nodes_free. Blocking: a Sentinel or Cluster URL asks the
 * servers (the client's timeouts). Errors: DLOCK_EINVAL (NULL),
 * DLOCK_ECONN (no sentinel named a master; no node of the cluster told its
 * slot map: the message says what each said), DLOCK_EAUTH, DLOCK_ETLS,
 * DLOCK_ENOMEM, DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_admin_nodes(dlock_admin *a, char ***nodes, size_t *n);
/* Frees what dlock_admin_nodes returned. NULL accepted. */
DLOCK_SINCE(0, 3)
DLOCK_API void dlock_admin_nodes_free(char **nodes, size_t n);

/* The master that serves `key` (its cluster slot's; on other URLs the one
 * master), as dlock_admin_nodes names it, into buf (len bytes, NUL-
 * terminated). Uses the slot map the client has (no I/O on a standalone
 * or a cluster client whose map is known). Errors: DLOCK_EINVAL (NULL,
 * len too small), DLOCK_ECONN (no master serves the slot now),
 * DLOCK_ENOMEM, DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_admin_node_of(dlock_admin *a, const char *key, char *buf,
                                  size_t len);

/* Runs cmds[0..n) on the master `node` (a name from dlock_admin_nodes or
 * dlock_admin_node_of): all written at once on one connection, the
 * replies read in order. Only reads are accepted: SCAN, TYPE, EXISTS,
 * PTTL, TTL, GET, GETRANGE, STRLEN, HGET, HGETALL, HLEN, HEXISTS, HKEYS,
 * LRANGE, LLEN, LINDEX, ZRANGE, ZRANGEBYSCORE, ZCARD, ZSCORE, SCARD,
 * SMEMBERS, PUBSUB (CHANNELS, NUMSUB, SHARDCHANNELS, SHARDNUMSUB), PING,
 * TIME, INFO, DBSIZE, ROLE, CLUSTER (SHARDS, SLOTS, NODES, INFO, MYID),
 * MEMORY USAGE; anything else is DLOCK_EINVAL before anything is sent.
 * timeout_ms (<= 0: the client's command_timeout_ms) bounds the whole
 * call from its start: the replies, and a new connection's login (its TCP
 * connect and TLS handshake are bounded by connect_timeout_ms). No command
 * is retried. On success replies[i] gets each reply (a refusal of one
 * command -- NOPERM, WRONGTYPE -- is a DLOCK_REPLY_ERROR reply, not a
 * failure of the call), owned by the caller (dlock_reply_free each).
 * Errors (replies[] all NULL, the connection closed): DLOCK_EINVAL (NULL
 * argument, n == 0, not a read command, an unknown node), DLOCK_ECONN
 * ("<node>: no reply within <timeout_ms> ms", "<node>: server closed the
 * connection", "cannot connect to <node>: ..."), DLOCK_EAUTH (the login was
 * refused: NOAUTH, WRONGPASS), DLOCK_ETLS, DLOCK_EREDIS (the node is a
 * Redis Sentinel, not a data node: the message says to use
 * redis-sentinel://), DLOCK_ENOMEM, DLOCK_EFORK, DLOCK_ECLOSED.
 * Thread-safety: any thread; calls on different nodes, or on the same node,
 * may run at once (each on a connection of its own). */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_admin_run(dlock_admin *a, const char *node,
                              const dlock_admin_cmd *cmds, size_t n,
                              long long timeout_ms, dlock_reply **replies);

/* Frees a reply and its elements. NULL accepted. Thread-safety: any
 * thread. */
DLOCK_SINCE(0, 3)
DLOCK_API void dlock_reply_free(dlock_reply *r);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ADMIN_H */
