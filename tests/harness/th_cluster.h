/*
 * th_cluster.h -- a real Redis Cluster for a test: N masters with R
 * replicas each, every node a redis-server of the harness (stopped however
 * the test ends), made into a cluster by `redis-cli --cluster create`; and
 * the operator's moves the tests need: find a key's master, migrate a slot
 * (IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE), kill a master and wait
 * for its replica to take over.
 */
#ifndef TH_CLUSTER_H
#define TH_CLUSTER_H

#include "th.h"

#define TH_CLUSTER_MAX 12

typedef struct th_cluster {
  int n; /* nodes */
  th_redis *node[TH_CLUSTER_MAX];
  char url[1024]; /* redis-cluster://127.0.0.1:p1,127.0.0.1:p2,... */
} th_cluster;

/* Starts masters x (1 + replicas) nodes (cluster-node-timeout node_timeout_ms)
 * and waits (bounded) until every node says cluster_state:ok. Fails the
 * test when the cluster does not form. The harness owns the result. */
th_cluster *th_cluster_new(int masters, int replicas, int node_timeout_ms);
/* The slot of key (CLUSTER KEYSLOT on a live node). */
unsigned th_cluster_slot(th_cluster *cl, const char *key);
/* Index of the node that is the master of slot now, as a live node's
 * CLUSTER SLOTS says; -1 if none. */
int th_cluster_master_of(th_cluster *cl, unsigned slot);
/* Node i's cluster id. */
void th_cluster_id(th_cluster *cl, int i, char out[48]);
/* Moves slot from node `from` to node `to` as an operator does: target
 * IMPORTING, source MIGRATING, then keys moved with MIGRATE for about
 * dwell_ms (clients meanwhile get ASK and TRYAGAIN), the rest moved, and
 * SETSLOT NODE on every master. */
void th_cluster_move_slot(th_cluster *cl, unsigned slot, int from, int to,
                          int dwell_ms);
/* Waits (bounded by timeout_ms) until a live node other than `dead` is the
 * master of slot and every live master says cluster_state:ok. Returns the
 * new master's index. */
int th_cluster_wait_new_master(th_cluster *cl, unsigned slot, int dead,
                               int64_t timeout_ms);

#endif
