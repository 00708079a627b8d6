/*
 * th_cluster.c -- a real Redis Cluster for a test (see th_cluster.h).
 */
#include "th_cluster.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_spawn.h"

static int alive(const th_cluster *cl, int i) { return cl->node[i]->pid > 0; }

static int state_ok(th_redis *r) {
  redisReply *rep = th_cmd(r, "CLUSTER INFO");
  int ok = rep && rep->type == REDIS_REPLY_STRING &&
           strstr(rep->str, "cluster_state:ok") != NULL;
  if (rep)
    freeReplyObject(rep);
  return ok;
}

static void create(th_cluster *cl, int replicas) {
  char cmd[2048];
  int o = snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
  for (int i = 0; i < cl->n && o < (int)sizeof cmd; i++)
    o += snprintf(cmd + o, sizeof cmd - (size_t)o, " 127.0.0.1:%d",
                  cl->node[i]->port);
  snprintf(cmd + o, sizeof cmd - (size_t)o,
           " --cluster-replicas %d --cluster-yes >%s 2>&1", replicas,
           th_tmpfile("cluster-create.log"));
  int st = system(cmd);
  if (st != 0)
    th_fail(__FILE__, __LINE__,
            "redis-cli --cluster create failed (%d): see %s", st,
            th_tmpfile("cluster-create.log"));
}

th_cluster *th_cluster_new(int masters, int replicas, int node_timeout_ms) {
  static th_cluster store;
  th_cluster *cl = &store;
  memset(cl, 0, sizeof *cl);
  cl->n = masters * (1 + replicas);
  if (cl->n > TH_CLUSTER_MAX)
    th_fail(__FILE__, __LINE__, "too many cluster nodes");
  int o = snprintf(cl->url, sizeof cl->url, "redis-cluster://");
  for (int i = 0; i < cl->n; i++) {
    char extra[256];
    snprintf(extra, sizeof extra,
             "cluster-enabled yes\ncluster-config-file nodes.conf\n"
             "cluster-node-timeout %d\ncluster-port %d\n"
             "cluster-replica-validity-factor 0\n",
             node_timeout_ms, dlc_free_port());
    cl->node[i] = th_redis_new(1, extra);
    o += snprintf(cl->url + o, sizeof cl->url - (size_t)o, "%s127.0.0.1:%d",
                  i ? "," : "", cl->node[i]->port);
  }
  create(cl, replicas);
  int64_t until = th_now_ms() + 30000L * th_timeout_mult();
  for (int i = 0; i < cl->n; i++)
    while (!state_ok(cl->node[i])) {
      if (th_now_ms() > until)
        th_fail(__FILE__, __LINE__, "the cluster did not form (node %d)", i);
      usleep(50 * 1000);
    }
  return cl;
}

unsigned th_cluster_slot(th_cluster *cl, const char *key) {
  for (int i = 0; i < cl->n; i++)
    if (alive(cl, i))
      return (unsigned)th_cmd_int(cl->node[i], "CLUSTER KEYSLOT %s", key);
  th_fail(__FILE__, __LINE__, "no live cluster node");
  return 0;
}

static int index_of_port(th_cluster *cl, long long port) {
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i]->port == port)
      return i;
  return -1;
}

/* The master of slot in r's view, or -1. */
static int master_in_view(th_cluster *cl, th_redis *r, unsigned slot) {
  redisReply *rep = th_cmd(r, "CLUSTER SLOTS");
  int who = -1;
  for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements;
       i++) {
    redisReply *e = rep->element[i];
    if (e->elements >= 3 && (unsigned)e->element[0]->integer <= slot &&
        slot <= (unsigned)e->element[1]->integer)
      who = index_of_port(cl, e->element[2]->element[1]->integer);
  }
  if (rep)
    freeReplyObject(rep);
  return who;
}

int th_cluster_master_of(th_cluster *cl, unsigned slot) {
  for (int i = 0; i < cl->n; i++)
    if (alive(cl, i))
      return master_in_view(cl, cl->node[i], slot);
  return -1;
}

void th_cluster_id(th_cluster *cl, int i, char out[48]) {
  redisReply *rep = th_cmd(cl->node[i], "CLUSTER MYID");
  CHECK(rep && rep->type == REDIS_REPLY_STRING);
  snprintf(out, 48, "%s", rep->str);
  freeReplyObject(rep);
}

/* Moves every key of slot now on `from` to `to`; returns how many. */
static int migrate_keys(th_cluster *cl, unsigned slot, int from, int to) {
  redisReply *keys =
      th_cmd(cl->node[from], "CLUSTER GETKEYSINSLOT %u 1000", slot);
  int n = 0;
  for (size_t i = 0;
       keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
    redisReply *r = th_cmd(cl->node[from], "MIGRATE 127.0.0.1 %d %b 0 5000",
                           cl->node[to]->port, keys->element[i]->str,
                           (size_t)keys->element[i]->len);
    if (r)
      freeReplyObject(r);
    n++;
  }
  if (keys)
    freeReplyObject(keys);
  return n;
}

void th_cluster_move_slot(th_cluster *cl, unsigned slot, int from, int to,
                          int dwell_ms) {
  char fid[48], tid[48];
  th_cluster_id(cl, from, fid);
  th_cluster_id(cl, to, tid);
  freeReplyObject(
      th_cmd(cl->node[to], "CLUSTER SETSLOT %u IMPORTING %s", slot, fid));
  freeReplyObject(
      th_cmd(cl->node[from], "CLUSTER SETSLOT %u MIGRATING %s", slot, tid));
  int64_t until = th_now_ms() + dwell_ms;
  do {
    migrate_keys(cl, slot, from, to);
    usleep(20 * 1000);
  } while (th_now_ms() < until);
  for (int i = 0; i < 50 && migrate_keys(cl, slot, from, to) > 0; i++) {
  }
  freeReplyObject(
      th_cmd(cl->node[to], "CLUSTER SETSLOT %u NODE %s", slot, tid));
  freeReplyObject(
      th_cmd(cl->node[from], "CLUSTER SETSLOT %u NODE %s", slot, tid));
  for (int i = 0; i < cl->n; i++)
    if (i != from && i != to && alive(cl, i)) {
      redisReply *r =
          th_cmd(cl->node[i], "CLUSTER SETSLOT %u NODE %s", slot, tid);
      if (r) /* replicas refuse: harmless */
        freeReplyObject(r);
    }
}

int th_cluster_wait_new_master(th_cluster *cl, unsigned slot, int dead,
                               int64_t timeout_ms) {
  int64_t until = th_now_ms() + timeout_ms * th_timeout_mult();
  for (;;) {
    int m = -1, all_ok = 1;
    for (int i = 0; i < cl->n; i++)
      if (alive(cl, i) && i != dead) {
        int v = master_in_view(cl, cl->node[i], slot);
        if (m < 0)
          m = v;
        all_ok &= state_ok(cl->node[i]) && v == m;
      }
    if (m >= 0 && m != dead && all_ok)
      return m;
    if (th_now_ms() > until)
      th_fail(__FILE__, __LINE__, "no new master for slot %u", slot);
    usleep(50 * 1000);
  }
}
