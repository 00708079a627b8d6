/*
 * soak.c -- `make soak` (soak.h): starts the topology (--topology:
 * standalone, one redis-server with appendfsync always; sentinel, 1
 * master + 2 replicas + 3 sentinels; cluster, 3 masters from their AOF;
 * etcd, 3 etcd members with fsync on (etcd.c) -- the last three with a
 * separate redis-server for the fenced store), the wire adversary in
 * front of every Redis data node (wire.h: a proxy per worker on
 * standalone, per node elsewhere, announced through replica-announce-port
 * / cluster-announce-port; none on etcd: it is a Redis-protocol proxy and
 * etcd speaks HTTP), the worker processes (this program re-executed with
 * --worker; a third drive the event-loop client, none on etcd where it is
 * not offered), then for --minutes (default $SOAK_MINUTES, else 10) injects a
 * random fault of the topology's list every 1-3 s (g_topo_faults): kill -9
 * of a worker (restarted; half the time one inside its unlock, then the
 * server is asked whether its hold is still there), SIGSTOP of a fenced
 * holder past its lease (the Kleppmann pause), SIGSTOP of a queued waiter
 * across a hand-over (a storm on one lock first: every worker crowds on
 * it), server SIGSTOP, server kill -9 and restart (its AOF reloads),
 * CLIENT KILL of the command connections, CLIENT KILL of the pub/sub
 * connections, a partition of one worker (its proxy blackholed past the
 * lease), a Sentinel failover (master kill -9), a replica SIGSTOPped under
 * sync_replicas acquisitions, a cluster slot migration, a blackholed
 * cluster node (its proxy accepts and forwards nothing) under holds
 * renewed on the other masters; on etcd, beside the worker faults, the
 * etcd leader kill -9 and restart from its data dir (it rejoins) and a
 * member's SIGSTOP/SIGCONT (leader or follower), with leases etcd accepts
 * (whole seconds, >= 2 s: soak.h). Meanwhile the wire adversary holds
 * requests (late copies), holds replies and cuts connections at random.
 * Then it stops the workers, waits until every late copy landed, reads the
 * counts (counts.log) and runs the checker. Exit 0 when the checker finds
 * nothing.
 *
 *   dlock_soak [--minutes M] [--workers N] [--seed S] [--keep]
 *              [--topology standalone|sentinel|cluster|etcd]
 *              [--faults CLASS,...]  only these fault classes (names as
 *                                    in faults.log: kill9, pause-waiter,
 *                                    wire-late, ...); default every one
 *              [--wire-gap MS]       mean gap between wire faults (1500)
 *   dlock_soak --check-only DIR    the checker over kept logs (no stores)
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "redis_spawn.h"
#include "soak.h"
#include "wire.h"

const soak_res soak_resources[] = {
    {"mx0", K_MUTEX, "soak-mx0"},       {"mx1", K_MUTEX, "soak-mx1"},
    {"fair0", K_FAIR, "soak-fair0"},    {"fen0", K_FENCED, "soak-fen0"},
    {"fen1", K_FENCED, "soak-fen1"},    {"rw0r", K_RW_READ, "soak-rw0"},
    {"rw0w", K_RW_WRITE, "soak-rw0"},   {"sem0", K_SEM, "soak-sem0"},
    {"latch0", K_LATCH, "soak-latch0"}, {"perm0", K_PERMIT, "soak-perm0"},
};
const int soak_nresources = sizeof soak_resources / sizeof soak_resources[0];
const char *const soak_kind_names[NKINDS] = {
    "mutex",        "fair",      "fenced", "rwlock read",
    "rwlock write", "semaphore", "latch",  "permits"};

int64_t soak_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

soak_shared *soak_map(const char *path, int create) {
  int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0 || (create && ftruncate(fd, sizeof(soak_shared)) != 0))
    return NULL;
  void *p = mmap(NULL, sizeof(soak_shared), PROT_READ | PROT_WRITE, MAP_SHARED,
                 fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

int soak_res_of_lock(const char *lock) {
  for (int i = 0; i < soak_nresources; i++)
    if (strcmp(soak_resources[i].lock, lock) == 0)
      return i;
  return -1;
}

/* Faults of the schedule (the wire adversary's run beside them). */
enum {
  F_KILL9,
  F_PAUSE,
  F_PAUSE_WAITER,
  F_STOP,
  F_RESTART,
  F_CKILL,
  F_PKILL,
  F_PART,
  F_FAILOVER,
  F_MIGRATE,
  F_STALL,
  F_BLACKHOLE,
  F_ETCD_KILL,
  F_ETCD_STOP,
  NFAULTS
};
/* Every fault class, as faults.log names it: the schedule's (in the order
 * of the enum above), then the wire adversary's three. The checker counts
 * by this list too (soak.h). */
const char *const soak_fault_classes[] = {"kill9",
                                          "pause-holder",
                                          "pause-waiter",
                                          "redis-stop",
                                          "redis-restart",
                                          "client-kill",
                                          "pubsub-kill",
                                          "partition",
                                          "failover",
                                          "slot-migrate",
                                          "replica-stall",
                                          "blackhole",
                                          "etcd-leader-kill",
                                          "etcd-member-stop",
                                          "wire-late",
                                          "wire-reply",
                                          "wire-cut"};
const int soak_n_fault_classes =
    (int)(sizeof soak_fault_classes / sizeof soak_fault_classes[0]);
_Static_assert(sizeof soak_fault_classes / sizeof soak_fault_classes[0] ==
                   NFAULTS + 3,
               "a name for every fault class");
static const char *const *const g_wire_names = soak_fault_classes + NFAULTS;

static struct {
  char dir[256];
  int topo;
  dlc_redis r;       /* standalone: the server; else the fenced store alone */
  dlc_redis node[3]; /* sentinel: data nodes; cluster: the masters */
  dlc_redis sentinel[3];      /* sentinel topology */
  wire *np[3];                /* the wire adversary in front of each node */
  int pport[3];               /* ... its port, which the node announces */
  char url[1024];             /* the workers' URL (sentinel, cluster) */
  wire *wp[SOAK_MAX_WORKERS]; /* standalone: one per worker */
  pid_t pid[SOAK_MAX_WORKERS];
  int n, nasync;
  soak_shared *sh;
  FILE *faults;
  pthread_mutex_t flog_mu;
  long counts[NFAULTS];
  int paused_in_cs;
  int only_faults, only_wire; /* --faults: masks; -1 every one */
  int64_t quiet_until;        /* no schedule fault before (us) */
} g = {
    .flog_mu = PTHREAD_MUTEX_INITIALIZER, .only_faults = -1, .only_wire = -1};

static const char *const g_topo_names[] = {"standalone", "sentinel", "cluster",
                                           "etcd"};

/* The faults each topology draws from. */
static const int g_topo_faults[4][NFAULTS + 1] = {
    {F_KILL9, F_PAUSE, F_PAUSE_WAITER, F_STOP, F_RESTART, F_CKILL, F_PKILL,
     F_PART, -1},
    {F_KILL9, F_PAUSE, F_PAUSE_WAITER, F_STOP, F_CKILL, F_PKILL, F_FAILOVER,
     F_STALL, -1},
    {F_KILL9, F_PAUSE, F_PAUSE_WAITER, F_RESTART, F_CKILL, F_PKILL, F_MIGRATE,
     F_BLACKHOLE, -1},
    {F_KILL9, F_PAUSE, F_PAUSE_WAITER, F_ETCD_KILL, F_ETCD_STOP, -1},
};

int soak_res_in(int i, int t) {
  int k = soak_resources[i].kind;
  if (t == SOAK_ETCD) /* what etcd offers (docs/etcd.md) */
    return k == K_MUTEX || k == K_FAIR || k == K_FENCED || k == K_PERMIT;
  return t != SOAK_SENTINEL || (k != K_SEM && k != K_LATCH && k != K_PERMIT);
}

/* One faults.log line (the schedule's and the wire adversary's threads). */
static void flog(const char *kind, int64_t t0, int64_t t1, const char *d) {
  pthread_mutex_lock(&g.flog_mu);
  if (g.faults) {
    fprintf(g.faults, "%s %lld %lld %s\n", kind, (long long)t0, (long long)t1,
            d);
    fflush(g.faults);
  }
  pthread_mutex_unlock(&g.flog_mu);
}

/* Worker i drives the event-loop client: a third of them (none on etcd:
 * not offered there). */
static int is_async(int i) { return g.topo != SOAK_ETCD && i % 3 == 1; }

static void spawn_worker(int i) {
  char idx[16], topo[8];
  snprintf(idx, sizeof idx, "%d", i);
  snprintf(topo, sizeof topo, "%d", g.topo);
  const char *url = g.topo == SOAK_STANDALONE ? wire_url(g.wp[i]) : g.url;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "dlock_soak", "--worker", idx, url, g.r.url, g.dir,
          topo, is_async(i) ? "1" : "0", (char *)NULL);
    _exit(127);
  }
  g.pid[i] = pid;
}

/* Restarts workers that exited (killed, or the store was down at start).
 * Only the workers are reaped here: the servers' spawners reap their own. */
static void reap(void) {
  int st;
  for (int i = 0; i < g.n; i++)
    if (g.pid[i] > 0 && waitpid(g.pid[i], &st, WNOHANG) == g.pid[i] &&
        !g.sh->stop)
      spawn_worker(i);
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* One command on a fresh connection to r's unix socket (NULL: failed). */
static redisReply *cmd_at(const dlc_redis *r, const char *fmt, ...) {
  struct timeval tv = {2, 0};
  redisContext *rc = r->sentinel
                         ? redisConnectWithTimeout("127.0.0.1", r->port, tv)
                         : redisConnectUnixWithTimeout(r->sock, tv);
  redisReply *x = NULL;
  if (rc && !rc->err) {
    redisSetTimeout(rc, tv);
    va_list ap;
    va_start(ap, fmt);
    x = redisvCommand(rc, fmt, ap);
    va_end(ap);
  }
  if (rc)
    redisFree(rc);
  return x;
}

static void raw_cmd(const dlc_redis *r, const char *cmd) {
  redisReply *x = cmd_at(r, "%s", cmd);
  if (x)
    freeReplyObject(x);
}

/* The data node whose real or announced (proxy) port is port, or -1. */
static int node_of_port(long long port) {
  for (int i = 0; i < 3; i++)
    if (g.node[i].port == port || g.pport[i] == port)
      return i;
  return -1;
}

/* The proxies of the three data nodes, made before the nodes so that
 * their configuration can announce the proxies' ports. */
static int make_node_proxies(void) {
  for (int i = 0; i < 3; i++) {
    if (!(g.np[i] = wire_new(0)))
      return -1;
    g.pport[i] = wire_port(g.np[i]);
  }
  return 0;
}

/* ---- sentinel topology ------------------------------------------------ */

#define MASTER_NAME "soak"
#define SENTINEL_DOWN_MS 2000

/* The data node sentinel s names master, or -1. */
static int sentinel_master(int s) {
  redisReply *x =
      cmd_at(&g.sentinel[s], "SENTINEL get-master-addr-by-name " MASTER_NAME);
  int who = -1;
  if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2)
    who = node_of_port(atoll(x->element[1]->str));
  if (x)
    freeReplyObject(x);
  return who;
}

static long long info_field(const dlc_redis *r, const char *section,
                            const char *field) {
  redisReply *x = cmd_at(r, "INFO %s", section);
  long long v = -1;
  const char *p =
      x && x->type == REDIS_REPLY_STRING ? strstr(x->str, field) : NULL;
  if (p)
    v = atoll(p + strlen(field) + 1);
  if (x)
    freeReplyObject(x);
  return v;
}

/* Waits (bounded) until the three sentinels name one master and it has
 * both replicas online. Returns that master, or -1. */
static int sentinel_settle(int64_t timeout_ms) {
  int64_t end = soak_now_us() + timeout_ms * 1000;
  while (soak_now_us() < end) {
    int m = sentinel_master(0);
    if (m >= 0 && m == sentinel_master(1) && m == sentinel_master(2) &&
        info_field(&g.node[m], "replication", "connected_slaves") == 2)
      return m;
    sleep_ms(50);
  }
  return -1;
}

/* The data nodes announce their proxies' ports (replica-announce-port):
 * the sentinels reach them, and name them to the clients, through the
 * wire adversary; a replication link through it is passed on raw. */
static int setup_sentinel(void) {
  char extra[512];
  if (make_node_proxies() != 0)
    return -1;
  snprintf(extra, sizeof extra,
           "repl-diskless-sync-delay 0\nreplica-announce-ip 127.0.0.1\n"
           "replica-announce-port %d\n",
           g.pport[0]);
  if (dlc_redis_prepare(&g.node[0], g.dir, "master-", extra) != 0 ||
      dlc_redis_start(&g.node[0], 1, 1) != 0)
    return -1;
  wire_set_target(g.np[0], g.node[0].port);
  for (int i = 1; i < 3; i++) {
    snprintf(extra, sizeof extra,
             "replicaof 127.0.0.1 %d\nrepl-diskless-sync-delay 0\n"
             "replica-announce-ip 127.0.0.1\nreplica-announce-port %d\n",
             g.node[0].port, g.pport[i]);
    if (dlc_redis_prepare(&g.node[i], g.dir, "replica-", extra) != 0 ||
        dlc_redis_start(&g.node[i], 1, 1) != 0)
      return -1;
    wire_set_target(g.np[i], g.node[i].port);
  }
  snprintf(extra, sizeof extra,
           "sentinel monitor " MASTER_NAME " 127.0.0.1 %d 2\n"
           "sentinel down-after-milliseconds " MASTER_NAME " %d\n"
           "sentinel failover-timeout " MASTER_NAME " 3000\n",
           g.pport[0], SENTINEL_DOWN_MS);
  for (int i = 0; i < 3; i++) {
    if (dlc_redis_prepare(&g.sentinel[i], g.dir, "sentinel-", extra) != 0)
      return -1;
    g.sentinel[i].sentinel = 1;
    if (dlc_redis_start(&g.sentinel[i], 1, 1) != 0)
      return -1;
  }
  snprintf(
      g.url, sizeof g.url,
      "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/" MASTER_NAME,
      g.sentinel[0].port, g.sentinel[1].port, g.sentinel[2].port);
  /* A failover can be voted once every sentinel knows the others and the
   * replicas. */
  int64_t end = soak_now_us() + 60000000;
  for (int i = 0; i < 3; i++)
    while (info_field(&g.sentinel[i], "sentinel", "sentinels") != 3 ||
           info_field(&g.sentinel[i], "sentinel", "slaves") != 2) {
      if (soak_now_us() > end)
        return -1;
      sleep_ms(50);
    }
  return sentinel_settle(30000) == 0 ? 0 : -1;
}

/* kill -9 of the master; the sentinels promote a replica; the old master
 * is started again (empty) and made a replica by the sentinels. Waits
 * (bounded) for the topology to heal. Returns the killed node. */
static int sentinel_failover(void) {
  int m = sentinel_master(0);
  if (m < 0)
    return -1;
  dlc_redis_kill(&g.node[m]);
  int64_t end = soak_now_us() + 60000000;
  int nm;
  while ((nm = sentinel_master(0)) == m || nm < 0 || sentinel_master(1) != nm ||
         sentinel_master(2) != nm) {
    if (soak_now_us() > end) {
      fprintf(stderr, "soak: no replica was promoted in 60 s\n");
      exit(2);
    }
    sleep_ms(50);
  }
  if (dlc_redis_respawn(&g.node[m], 50, 1) != 0) {
    fprintf(stderr, "soak: old master did not restart\n");
    exit(2);
  }
  if (sentinel_settle(60000) < 0)
    fprintf(stderr, "soak: replicas not back online after a failover\n");
  return m;
}

/* A replica SIGSTOPped for 1.2-3 s: acquisitions with sync_replicas 2 are
 * not confirmed (DLOCK_ENOSYNC: undone, retried); meanwhile the wire
 * adversary is biased to one lock's requests (the undos among them). */
static int replica_stall(char *d, size_t dn) {
  int m = sentinel_master(0);
  if (m < 0)
    return -1;
  int k = (m + 1 + rand() % 2) % 3;
  int ms = 1200 + rand() % 1800;
  int res = rand() % 5; /* a mutex kind: mx0 .. fen1 */
  wire_focus(soak_resources[res].lock, ms + 1500);
  kill(g.node[k].pid, SIGSTOP);
  sleep_ms(ms);
  kill(g.node[k].pid, SIGCONT);
  snprintf(d, dn, "%d node=%d focus=%s", k, k, soak_resources[res].lock);
  return k;
}

/* ---- cluster topology ------------------------------------------------- */

static int cluster_ok(const dlc_redis *r) {
  redisReply *x = cmd_at(r, "CLUSTER INFO");
  int ok = x && x->type == REDIS_REPLY_STRING &&
           strstr(x->str, "cluster_state:ok") != NULL;
  if (x)
    freeReplyObject(x);
  return ok;
}

static int cluster_settle(int64_t timeout_ms) {
  int64_t end = soak_now_us() + timeout_ms * 1000;
  for (int i = 0; i < 3; i++)
    while (!cluster_ok(&g.node[i])) {
      if (soak_now_us() > end)
        return -1;
      sleep_ms(50);
    }
  return 0;
}

/* Each master announces its proxy's port (cluster-announce-port), so
 * CLUSTER SLOTS, MOVED and ASK send the clients through the wire
 * adversary; the cluster bus is direct. */
static int setup_cluster(void) {
  char cmd[1024];
  int o = snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
  int u = snprintf(g.url, sizeof g.url, "redis-cluster://");
  if (make_node_proxies() != 0)
    return -1;
  for (int i = 0; i < 3; i++) {
    char extra[640];
    int bus = dlc_free_port();
    snprintf(extra, sizeof extra,
             "cluster-enabled yes\ncluster-config-file nodes.conf\n"
             "cluster-node-timeout 5000\ncluster-port %d\n"
             "cluster-require-full-coverage no\n"
             "cluster-announce-ip 127.0.0.1\ncluster-announce-port %d\n"
             "cluster-announce-bus-port %d\n"
             "appendonly yes\nappendfsync always\n",
             bus, g.pport[i], bus);
    if (dlc_redis_prepare(&g.node[i], g.dir, "master-", extra) != 0 ||
        dlc_redis_start(&g.node[i], 1, 1) != 0)
      return -1;
    wire_set_target(g.np[i], g.node[i].port);
    o += snprintf(cmd + o, sizeof cmd - (size_t)o, " 127.0.0.1:%d",
                  g.node[i].port);
    u += snprintf(g.url + u, sizeof g.url - (size_t)u, "%s127.0.0.1:%d",
                  i ? "," : "", g.pport[i]);
  }
  snprintf(cmd + o, sizeof cmd - (size_t)o,
           " --cluster-replicas 0 --cluster-yes >%s/cluster-create.log 2>&1",
           g.dir);
  if (system(cmd) != 0)
    return -1;
  return cluster_settle(60000);
}

/* The node that serves slot (CLUSTER SLOTS), or -1. */
static int slot_owner(unsigned slot) {
  redisReply *x = NULL;
  for (int i = 0; i < 3 && !x; i++)
    x = cmd_at(&g.node[i], "CLUSTER SLOTS");
  int who = -1;
  for (size_t i = 0; x && x->type == REDIS_REPLY_ARRAY && i < x->elements;
       i++) {
    redisReply *e = x->element[i];
    if (e->elements >= 3 && (unsigned)e->element[0]->integer <= slot &&
        slot <= (unsigned)e->element[1]->integer)
      who = node_of_port(e->element[2]->element[1]->integer);
  }
  if (x)
    freeReplyObject(x);
  return who;
}

static int lock_slot(const char *lock) {
  redisReply *x = cmd_at(&g.node[0], "CLUSTER KEYSLOT %s", lock);
  int slot = x && x->type == REDIS_REPLY_INTEGER ? (int)x->integer : -1;
  if (x)
    freeReplyObject(x);
  return slot;
}

static void node_id(int i, char out[48]) {
  redisReply *x = cmd_at(&g.node[i], "CLUSTER MYID");
  snprintf(out, 48, "%s", x && x->type == REDIS_REPLY_STRING ? x->str : "");
  if (x)
    freeReplyObject(x);
}

static int migrate_keys(unsigned slot, int from, int to) {
  redisReply *keys =
      cmd_at(&g.node[from], "CLUSTER GETKEYSINSLOT %u 1000", slot);
  int n = 0;
  for (size_t i = 0;
       keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
    redisReply *r =
        cmd_at(&g.node[from], "MIGRATE 127.0.0.1 %d %b 0 5000", g.node[to].port,
               keys->element[i]->str, (size_t)keys->element[i]->len);
    if (r)
      freeReplyObject(r);
    n++;
  }
  if (keys)
    freeReplyObject(keys);
  return n;
}

/* Moves the slot of a random resource's lock to another master as an
 * operator does (IMPORTING, MIGRATING, MIGRATE for a dwell, SETSLOT NODE
 * everywhere). Returns the slot, or -1. */
static int cluster_migrate(void) {
  int i;
  do
    i = rand() % soak_nresources;
  while (!soak_res_in(i, g.topo));
  int s = lock_slot(soak_resources[i].lock);
  int from = s >= 0 ? slot_owner((unsigned)s) : -1;
  if (from < 0)
    return -1;
  unsigned slot = (unsigned)s;
  int to = (from + 1 + rand() % 2) % 3;
  char fid[48], tid[48];
  node_id(from, fid);
  node_id(to, tid);
  redisReply *a =
      cmd_at(&g.node[to], "CLUSTER SETSLOT %u IMPORTING %s", slot, fid);
  redisReply *b =
      cmd_at(&g.node[from], "CLUSTER SETSLOT %u MIGRATING %s", slot, tid);
  if (a)
    freeReplyObject(a);
  if (b)
    freeReplyObject(b);
  int64_t until = soak_now_us() + (200 + rand() % 800) * 1000LL;
  do {
    migrate_keys(slot, from, to);
    sleep_ms(20);
  } while (soak_now_us() < until);
  for (int k = 0; k < 50 && migrate_keys(slot, from, to) > 0; k++)
    ;
  int order[3] = {to, from, 3 - to - from};
  for (int k = 0; k < 3; k++) {
    redisReply *r =
        cmd_at(&g.node[order[k]], "CLUSTER SETSLOT %u NODE %s", slot, tid);
    if (r)
      freeReplyObject(r);
  }
  return (int)slot;
}

/* A master's proxy blackholed for 2.5-5 s (connections hang, connects
 * too) while the workers hold locks 2-4 s under the watchdog (long_holds):
 * holds on the OTHER masters must not be lost (issue 38 item 6: nothing
 * but renewals may run on the renewal path). The wire adversary is off
 * meanwhile, so a loss of such a hold has no other cause; the detail
 * names the locks the blackholed master serves (checker.c). */
static int blackhole_node(char *d, size_t dn, int64_t *t0, int64_t *t1) {
  int k = rand() % 3;
  int o = snprintf(d, dn, "%d node=%d locks=", k, k);
  for (int i = 0; i < soak_nresources; i++) {
    int s = lock_slot(soak_resources[i].lock);
    if (s >= 0 && slot_owner((unsigned)s) == k && o < (int)dn - 40 &&
        (i == 0 ||
         strcmp(soak_resources[i].lock, soak_resources[i - 1].lock) != 0))
      o += snprintf(d + o, dn - (size_t)o, "%s,", soak_resources[i].lock);
  }
  g.sh->long_holds = 1;
  wire_enable(0);
  sleep_ms(1500); /* the workers are in long holds by now */
  *t0 = soak_now_us();
  wire_blackhole(g.np[k], 1);
  sleep_ms(2500 + rand() % 2500);
  wire_blackhole(g.np[k], 0);
  *t1 = soak_now_us();
  sleep_ms(2LL * SOAK_LEASE_MS);
  g.sh->long_holds = 0;
  wire_enable(g.only_wire & WIRE_ALL);
  return k;
}

/* ---- faults ----------------------------------------------------------- */

/* The server the server faults hit: standalone's, the sentinels' master,
 * a random cluster master. */
static dlc_redis *target(void) {
  if (g.topo == SOAK_ETCD)
    return NULL;
  if (g.topo == SOAK_STANDALONE)
    return &g.r;
  if (g.topo == SOAK_SENTINEL) {
    int m = sentinel_master(0);
    return m >= 0 ? &g.node[m] : NULL;
  }
  return &g.node[rand() % 3];
}

/* The server that holds lock's keys now (NULL: not known). */
static dlc_redis *lock_server(const char *lock) {
  if (g.topo == SOAK_STANDALONE)
    return &g.r;
  if (g.topo == SOAK_SENTINEL) {
    int m = sentinel_master(0);
    return m >= 0 ? &g.node[m] : NULL;
  }
  int s = lock_slot(lock), k = s >= 0 ? slot_owner((unsigned)s) : -1;
  return k >= 0 ? &g.node[k] : NULL;
}

/* A worker to hurt: one in a fenced section before its write when `fenced`
 * and one is, else any not holding a semaphore permit (a permit has no
 * lease: a killed holder would leak it for good). -1 if none. */
static int pick_worker(int fenced) {
  int start = rand() % g.n;
  for (int k = 0; fenced && k < g.n; k++)
    if (g.sh->phase[(start + k) % g.n] == PH_PRE_WRITE)
      return (start + k) % g.n;
  for (int k = 0; k < g.n; k++)
    if (g.sh->phase[(start + k) % g.n] != PH_SEM)
      return (start + k) % g.n;
  return -1;
}

/* After a worker was killed inside its unlock: once no late copy of its
 * requests is held on the wire any more (and a moment for those in
 * flight), is its hold's field still on the lock? 1 yes (the unlock did
 * not run: the hold lasts to its deadline), 0 no (it ended by *at), -1
 * not known. */
static int field_verdict(int res, const char *field, int pid, int64_t *at) {
  int64_t end = soak_now_us() + 12000000;
  while (wire_pending(pid) > 0 && soak_now_us() < end)
    sleep_ms(20);
  if (wire_pending(pid) > 0)
    return -1;
  sleep_ms(200);
  const char *lock = soak_resources[res].lock;
  if (g.topo == SOAK_ETCD) {
    int v = soak_etcd_has_field(lock, field);
    *at = soak_now_us();
    return v;
  }
  dlc_redis *t = lock_server(lock);
  redisReply *x = t ? cmd_at(t, "HEXISTS %s %s", lock, field) : NULL;
  *at = soak_now_us();
  int v = x && x->type == REDIS_REPLY_INTEGER ? (int)x->integer : -1;
  if (x)
    freeReplyObject(x);
  return v;
}

/* kill -9 of a worker -- half the time one inside its unlock of a mutex
 * kind (the checker judges it by the server's answer: field_verdict). */
static int kill_worker(char *d, size_t dn) {
  int w = -1, in_unlock = rand() % 2;
  int64_t end = soak_now_us() + 1500000;
  while (in_unlock && w < 0 && soak_now_us() < end) {
    for (int k = 0; k < g.n && w < 0; k++)
      if (g.sh->phase[k] == PH_UNLOCK)
        w = k;
    if (w < 0)
      usleep(500);
  }
  if (w < 0 && (w = pick_worker(0)) < 0)
    return -1;
  int ph = g.sh->phase[w], res = g.sh->res[w], st;
  char field[64];
  memcpy(field, g.sh->field[w], sizeof field);
  field[63] = '\0';
  pid_t pid = g.pid[w];
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  int64_t at = 0;
  int v = ph == PH_UNLOCK && res >= 0 && field[0]
              ? field_verdict(res, field, (int)pid, &at)
              : -1;
  snprintf(d, dn, "%d pid=%d res=%s phase=%d field=%d at=%lld", w, (int)pid,
           res >= 0 ? soak_resources[res].name : "-", ph, v, (long long)at);
  if (!g.sh->stop)
    spawn_worker(w);
  return w;
}

/* A waiter of the resource for the pause's shape (-1 none): 0 "handover"
 * -- a short lease and budget to spare, paused past its lease (a
 * hand-over to it expires; it resumes still waiting: issue 38 item 1); 2
 * any. *pause_ms is set. */
static int find_waiter(int res, int shape, int *pause_ms) {
  int64_t now = soak_now_us();
  for (int k = 0; k < g.n; k++) {
    if (g.sh->phase[k] != PH_WAIT || g.sh->res[k] != res)
      continue;
    int64_t left = g.sh->wait_end[k] - now;
    long long sl = soak_short_lease_ms(g.topo);
    if (shape == 0 && g.sh->lease[k] == sl && left > 3000000) {
      *pause_ms = (int)sl + 300 + rand() % 1000;
      return k;
    }
    if (shape == 2) {
      *pause_ms = (int)sl + 300 + rand() % 2500;
      return k;
    }
  }
  return -1;
}

/* Waits (bounded) until worker w is in phase ph on res; 0 or -1. */
static int await_phase(int w, int ph, int res, int64_t ms) {
  int64_t end = soak_now_us() + ms * 1000;
  /* a fenced holder is PH_PRE_WRITE until its store write */
  while (!((g.sh->phase[w] == ph ||
            (ph == PH_HOLD && g.sh->phase[w] == PH_PRE_WRITE)) &&
           g.sh->res[w] == res)) {
    if (soak_now_us() > end)
      return -1;
    usleep(200);
  }
  return 0;
}

static void order(int w, int res, long long lease, long long wait, int gate) {
  g.sh->order_lease[w] = lease;
  g.sh->order_wait[w] = wait;
  g.sh->release[w] = 0;
  g.sh->go[w] = 0;
  g.sh->order_gate[w] = gate;
  g.sh->order_res[w] = res + 1;
}

/* The "timeout" shape, directed (a storm barges over it): nobody else on
 * the lock; A holds it with a long lease until released; B queues with a
 * short budget and is paused at once, C queues behind it with a long one;
 * A unlocks while B is the queue's young head, and B's budget runs out
 * while it is paused: B's wait ends without attempting, and the free lock
 * must still reach C (issue 38 item 7). Returns B, or -1. */
static int directed_timeout(int res, int *pause) {
  int b[3], nb = 0;
  int64_t end = soak_now_us() + 15000000;
  for (int k = 0; k < g.n; k++) /* the lock's users drain */
    while (g.sh->res[k] == res && g.sh->phase[k] != PH_IDLE &&
           soak_now_us() < end)
      usleep(1000);
  sleep_ms(500); /* and their subscriptions' linger ends */
  /* three blocking workers seen moving on (not stuck in a call) */
  for (int64_t stop = soak_now_us() + 3000000; nb < 3 && soak_now_us() < stop;
       usleep(1000)) {
    int64_t now = soak_now_us();
    for (int k = 0; k < g.n && nb < 3; k++) {
      int dup = 0;
      for (int i = 0; i < nb; i++)
        dup |= b[i] == k;
      if (!dup && !is_async(k) && now - g.sh->since[k] < 300000)
        b[nb++] = k;
    }
  }
  if (nb < 3)
    return -2;
  order(b[1], res, soak_short_lease_ms(g.topo), 400, 1);
  order(b[2], res, soak_short_lease_ms(g.topo), SOAK_LONG_WAIT_MS, 1);
  int64_t ready = soak_now_us() + 15000000; /* B and C at their gates */
  while ((g.sh->order_res[b[1]] || g.sh->order_res[b[2]]) &&
         soak_now_us() < ready)
    usleep(200);
  order(b[0], res, SOAK_LONG_LEASE_MS, SOAK_WAIT_MS, 0);
  if (g.sh->order_res[b[1]] || g.sh->order_res[b[2]] ||
      await_phase(b[0], PH_HOLD, res, 15000) != 0) {
    int why = g.sh->order_res[b[1]] || g.sh->order_res[b[2]] ? -3 : -4;
    g.sh->go[b[1]] = g.sh->go[b[2]] = 1; /* they fail or pass, harmless */
    g.sh->release[b[0]] = 1;
    g.sh->order_res[b[0]] = g.sh->order_res[b[1]] = g.sh->order_res[b[2]] = 0;
    return why;
  }
  g.sh->go[b[1]] = 1;
  int in = await_phase(b[1], PH_WAIT, res, 2000);
  usleep(2000); /* B's first attempt queued it: the head, young */
  g.sh->go[b[2]] = 1;
  in |= await_phase(b[2], PH_WAIT, res, 2000);
  usleep(2000); /* C queued behind B */
  kill(g.pid[b[1]], SIGSTOP);
  g.sh->release[b[0]] = 1; /* A unlocks while B is paused */
  *pause = 1200 + rand() % 800;
  sleep_ms(*pause);
  kill(g.pid[b[1]], SIGCONT);
  return in == 0 ? b[1] : -5;
}

/* SIGSTOP of a queued waiter across a hand-over: every worker crowds on
 * one mutex-kind resource (a storm), a waiter of the drawn shape is
 * paused, resumed, the storm ends; no schedule fault for a long lease
 * after it (a lock left free with a waiter must show). */
static int pause_waiter(char *d, size_t dn, int64_t *t1) {
  int res = rand() % 5; /* mx0 .. fen1 */
  wire_enable(0);       /* until the quiet ends (run): the gap is judged */
  int shape = rand() & 1, pause = 0, w = -1;
  if (shape == 1) {
    /* a fenced lock: the event-loop workers never subscribe to its
     * channel (an extra subscriber makes the unlock publish to all) */
    res = 3 + rand() % 2;
    g.sh->shun = res + 1;
    w = directed_timeout(res, &pause);
    *t1 = soak_now_us();                 /* the window ends at the resume */
    sleep_ms(SOAK_LONG_LEASE_MS + 1000); /* C's wait, judged */
    g.sh->shun = 0;
  } else {
    g.sh->storm = res + 1;
    sleep_ms(800);
    int64_t end = soak_now_us() + 2000000;
    while ((w = find_waiter(res, shape, &pause)) < 0 && soak_now_us() < end)
      usleep(1000);
    if (w < 0 && (w = find_waiter(res, 2, &pause)) >= 0)
      shape = 2;
    if (w >= 0) {
      kill(g.pid[w], SIGSTOP);
      sleep_ms(pause);
      kill(g.pid[w], SIGCONT);
    }
    *t1 = soak_now_us();
    sleep_ms(1000);
    g.sh->storm = 0;
  }
  static const char *const shapes[3] = {"handover", "timeout", "any"};
  snprintf(d, dn, "%d res=%s shape=%s pause=%d", w, soak_resources[res].name,
           shapes[shape], pause);
  g.quiet_until = soak_now_us() + (SOAK_LONG_LEASE_MS + 2000) * 1000LL;
  return w;
}

static void fault(int kind) {
  int64_t t0 = soak_now_us(), t1 = 0;
  int w = kind == F_KILL9 || kind == F_PAUSE_WAITER || kind == F_STALL ||
                  kind == F_BLACKHOLE || kind == F_ETCD_KILL ||
                  kind == F_ETCD_STOP
              ? -1
              : pick_worker(kind == F_PAUSE);
  char d[512] = "";
  dlc_redis *t = target();
  switch (kind) {
  case F_KILL9:
    w = kill_worker(d, sizeof d);
    break;
  case F_PAUSE:
    if (w < 0)
      break;
    /* past its lease: a fixed lease shorter than the pause, or the
     * watchdog's (not renewed while stopped) -- a 10 s lease outlives it,
     * and no other holder can come (a sentinel soak counted such a pause
     * and then said the checker "missed Kleppmann") */
    g.paused_in_cs +=
        g.sh->phase[w] == PH_PRE_WRITE && g.sh->lease[w] < SOAK_LEASE_MS + 1000;
    snprintf(d, sizeof d, "%d res=%s", w,
             g.sh->res[w] >= 0 ? soak_resources[g.sh->res[w]].name : "-");
    kill(g.pid[w], SIGSTOP);
    sleep_ms(soak_pause_ms(g.topo));
    kill(g.pid[w], SIGCONT);
    break;
  case F_PAUSE_WAITER:
    w = pause_waiter(d, sizeof d, &t1);
    break;
  case F_STOP:
    if (!t)
      break;
    kill(t->pid, SIGSTOP);
    /* Under Sentinel, shorter than down-after-milliseconds: a pause that
     * gets the master replaced while it still runs is the documented
     * "still-running old master" case (its renewals are not WAITed). */
    sleep_ms(g.topo == SOAK_SENTINEL ? 300 + rand() % (SENTINEL_DOWN_MS / 2)
                                     : 500 + rand() % 1500);
    kill(t->pid, SIGCONT);
    break;
  case F_RESTART:
    dlc_redis_kill(t);
    if (dlc_redis_respawn(t, 50, 1) != 0) {
      fprintf(stderr, "soak: redis-server did not restart\n");
      exit(2);
    }
    w = t == &g.r ? -1 : (int)(t - g.node);
    if (g.topo == SOAK_CLUSTER && cluster_settle(60000) != 0)
      fprintf(stderr, "soak: cluster not ok 60 s after a restart\n");
    break;
  case F_CKILL:
  case F_PKILL:
    for (int i = 0; i < (g.topo == SOAK_CLUSTER ? 3 : 1); i++) {
      if (g.topo == SOAK_CLUSTER)
        t = &g.node[i];
      if (t)
        raw_cmd(t, kind == F_CKILL ? "CLIENT KILL TYPE normal"
                                   : "CLIENT KILL TYPE pubsub");
    }
    break;
  case F_PART:
    if (w < 0)
      break;
    wire_blackhole(g.wp[w], 1);
    sleep_ms(SOAK_LEASE_MS + 1000);
    wire_blackhole(g.wp[w], 0);
    break;
  case F_FAILOVER:
    w = sentinel_failover();
    break;
  case F_STALL:
    w = replica_stall(d, sizeof d);
    break;
  case F_BLACKHOLE:
    w = blackhole_node(d, sizeof d, &t0, &t1);
    g.quiet_until = soak_now_us() + 3000000;
    break;
  case F_ETCD_KILL:
  case F_ETCD_STOP:
    w = kind == F_ETCD_KILL ? soak_etcd_leader_kill(d, sizeof d)
                            : soak_etcd_member_stop(d, sizeof d);
    if (w == -2) { /* the cluster did not heal: nothing more to judge */
      g.sh->stop = 1;
      exit(2);
    }
    break;
  default: /* F_MIGRATE */
    w = cluster_migrate();
    break;
  }
  g.counts[kind]++;
  if (!d[0])
    snprintf(d, sizeof d, "%d", w);
  flog(soak_fault_classes[kind], t0, t1 ? t1 : soak_now_us(), d);
}

/* A plain semaphore has no lease: a permit taken by an acquisition whose
 * outcome is unknown (DLOCK_ECONN) is gone for good, and the semaphore
 * starves. Every 10 s: with no sem section running (sem_frozen), no late
 * copy held, the permits missing are posted back -- a count change logged
 * as "sem-repair" (checker.c counts it as posts). Standalone and cluster. */
static void sem_repair(void) {
  static int64_t next;
  int sem = soak_res_of_lock("soak-sem0");
  dlc_redis *t = g.topo == SOAK_SENTINEL || g.topo == SOAK_ETCD
                     ? NULL
                     : lock_server("soak-sem0");
  if (soak_now_us() < next || !t || sem < 0)
    return;
  next = soak_now_us() + 10000000;
  g.sh->sem_frozen = 1;
  sleep_ms(200);
  int busy = wire_pending(0) > 0;
  for (int k = 0; k < g.n; k++)
    busy |= g.sh->res[k] == sem && g.sh->phase[k] != PH_IDLE;
  redisReply *x = busy ? NULL : cmd_at(t, "GET soak-sem0");
  long long v = x && x->type == REDIS_REPLY_STRING ? atoll(x->str) : -1;
  if (x)
    freeReplyObject(x);
  if (v >= 0 && v < SOAK_SEM_PERMITS) {
    int64_t t0 = soak_now_us();
    redisReply *y =
        cmd_at(t, "INCRBY soak-sem0 %lld", (long long)SOAK_SEM_PERMITS - v);
    if (y && y->type == REDIS_REPLY_INTEGER) {
      char d[64];
      snprintf(d, sizeof d, "%lld", (long long)SOAK_SEM_PERMITS - v);
      flog("sem-repair", t0, soak_now_us(), d);
    }
    if (y)
      freeReplyObject(y);
  }
  g.sh->sem_frozen = 0;
}

static int init_counts(const char *url) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  dlock_client *c;
  dlock_sem *s;
  dlock_latch *l;
  dlock_permits *p;
  if (dlock_client_new(&cfg, &c))
    return -1;
  if (g.topo == SOAK_ETCD) { /* the one counting kind etcd offers */
    int rc = dlock_permits_new(c, "soak-perm0", &p) ||
             dlock_permits_try_set_permits(p, SOAK_PERMITS);
    if (!rc)
      dlock_permits_free(p);
    dlock_client_free(c);
    return rc ? -1 : 0;
  }
  int rc = dlock_sem_new(c, "soak-sem0", &s) ||
           dlock_sem_init(s, SOAK_SEM_PERMITS) ||
           dlock_latch_new(c, "soak-latch0", &l) ||
           dlock_latch_init(l, SOAK_LATCH_N) ||
           dlock_permits_new(c, "soak-perm0", &p) ||
           dlock_permits_try_set_permits(p, SOAK_PERMITS);
  if (!rc) {
    dlock_sem_free(s);
    dlock_latch_free(l);
    dlock_permits_free(p);
  }
  dlock_client_free(c);
  return rc ? -1 : 0;
}

static int setup(void) {
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g.dir, sizeof g.dir, "%s/dlock-soak-XXXXXX", tmp);
  if (!mkdtemp(g.dir))
    return -1;
  char p[300], f[300];
  snprintf(p, sizeof p, "%s/shared", g.dir);
  snprintf(f, sizeof f, "%s/faults.log", g.dir);
  g.sh = soak_map(p, 1);
  g.faults = fopen(f, "w");
  if (!g.sh || !g.faults)
    return -1;
  /* standalone: the locks' server and the store; else the store alone */
  if (dlc_redis_prepare(&g.r, g.dir, "redis-",
                        "appendonly yes\nappendfsync always\n") != 0 ||
      dlc_redis_start(&g.r, 1, 1) != 0)
    return -1;
  if (g.topo == SOAK_SENTINEL && setup_sentinel() != 0)
    return -1;
  if (g.topo == SOAK_CLUSTER && setup_cluster() != 0)
    return -1;
  if (g.topo == SOAK_ETCD && soak_etcd_setup(g.dir, g.url, sizeof g.url) != 0)
    return -1;
  if (g.topo != SOAK_SENTINEL &&
      init_counts(g.topo == SOAK_STANDALONE ? g.r.url : g.url) != 0)
    return -1;
  for (int i = 0; g.topo == SOAK_STANDALONE && i < g.n; i++)
    if (!(g.wp[i] = wire_new(g.r.port)))
      return -1;
  return 0;
}

static void finish(void) {
  g.sh->stop = 1;
  int64_t end = soak_now_us() + 30000000;
  for (int i = 0; i < g.n; i++) {
    kill(g.pid[i], SIGCONT);
    int st;
    while (waitpid(g.pid[i], &st, WNOHANG) == 0 && soak_now_us() < end)
      sleep_ms(20);
    kill(g.pid[i], SIGKILL);
    waitpid(g.pid[i], &st, 0);
  }
}

/* After the workers stopped: the wire adversary off, every late copy
 * landed (bounded), the permits' leases run out; then the counts of the
 * counting kinds go to counts.log for the checker. */
static void final_counts(void) {
  wire_enable(0);
  int64_t end = soak_now_us() + 15000000;
  while (wire_pending(0) > 0 && soak_now_us() < end)
    sleep_ms(50);
  if (g.topo == SOAK_SENTINEL)
    return;
  /* the longest permit lease (5 s) has run out; on etcd also a killed
   * worker's session lease, and the lessor's revoke */
  sleep_ms(6000 +
           (g.topo == SOAK_ETCD ? SOAK_LEASE_MS + SOAK_ETCD_REVOKE_MS : 0));
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g.topo == SOAK_STANDALONE ? g.r.url : g.url;
  dlock_client *c;
  dlock_sem *s = NULL;
  dlock_latch *l = NULL;
  dlock_permits *p = NULL;
  long long sv = -1, lv = -1, pa = -1;
  size_t taken = 0;
  dlock_permit *list = NULL;
  int counters = g.topo != SOAK_ETCD; /* sem, latch: not on etcd */
  if (dlock_client_new(&cfg, &c) == 0) {
    if (counters &&
        (dlock_sem_new(c, "soak-sem0", &s) || dlock_sem_value(s, &sv)))
      sv = -1;
    if (counters &&
        (dlock_latch_new(c, "soak-latch0", &l) || dlock_latch_count(l, &lv)))
      lv = -1;
    if (dlock_permits_new(c, "soak-perm0", &p) ||
        dlock_permits_available(p, &pa) < 0 ||
        dlock_permits_list(p, &list, &taken, NULL) < 0)
      pa = -1;
    dlock_permits_list_free(list);
    dlock_sem_free(s);
    dlock_latch_free(l);
    dlock_permits_free(p);
    dlock_client_free(c);
  }
  char f[300];
  snprintf(f, sizeof f, "%s/counts.log", g.dir);
  FILE *o = fopen(f, "w");
  if (o) {
    if (counters)
      fprintf(o, "sem0 %lld\nlatch0 %lld\n", sv, lv);
    fprintf(o, "perm0 %lld %zu\npending %d\n", pa, taken, wire_pending(0));
    fclose(o);
  }
}

static void stop_servers(int remove) {
  if (g.topo == SOAK_ETCD)
    soak_etcd_stop(remove);
  dlc_redis *all[7] = {&g.r,          &g.node[0],     &g.node[1],
                       &g.node[2],    &g.sentinel[0], &g.sentinel[1],
                       &g.sentinel[2]};
  for (int i = 0; i < 7; i++)
    if (all[i]->dir[0]) {
      dlc_redis_stop(all[i]);
      if (remove)
        dlc_redis_remove_dir(all[i]);
    }
}

/* --faults a,b,...: the schedule's and the wire adversary's classes. */
static int parse_only(const char *list) {
  g.only_faults = g.only_wire = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *sp, *t = strtok_r(buf, ",", &sp); t;
       t = strtok_r(NULL, ",", &sp)) {
    int found = 0;
    for (int k = 0; k < NFAULTS; k++)
      if (strcmp(t, soak_fault_classes[k]) == 0)
        g.only_faults |= 1 << k, found = 1;
    for (int k = 0; k < 3; k++)
      if (strcmp(t, g_wire_names[k]) == 0)
        g.only_wire |= 1 << k, found = 1;
    if (!found) {
      fprintf(stderr, "dlock_soak: no fault class '%s'\n", t);
      return -1;
    }
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: dlock_soak [--minutes M] [--workers N] [--seed S] "
                  "[--topology standalone|sentinel|cluster|etcd] [--faults "
                  "CLASS,...] [--wire-gap MS] [--keep]\n");
  return 64;
}

static void run(double minutes, const int *kinds, int nk) {
  int64_t start = soak_now_us(), end = start + (int64_t)(minutes * 60e6);
  int64_t next_status = start + 60000000; /* a status line a minute */
  while (soak_now_us() < end) {
    sleep_ms(1000 + rand() % 2000);
    reap();
    if (soak_now_us() >= g.quiet_until)
      wire_enable(g.only_wire & WIRE_ALL);
    if (nk > 0 && soak_now_us() >= g.quiet_until)
      fault(kinds[rand() % nk]);
    reap();
    sem_repair();
    if (soak_now_us() >= next_status) {
      long total = 0;
      for (int k = 0; k < nk; k++)
        total += g.counts[kinds[k]];
      printf("soak: %.1f of %.1f min, %ld faults so far (wire: %ld)\n",
             (double)(soak_now_us() - start) / 60e6, minutes, total,
             wire_count(WIRE_LATE) + wire_count(WIRE_REPLY) +
                 wire_count(WIRE_CUT));
      fflush(stdout);
      next_status += 60000000;
    }
  }
}

/* The command line into g and the out-parameters; 0, or -1 (usage
 * printed). */
static int parse_args(int argc, char **argv, double *minutes, unsigned *seed,
                      int *keep, int *gap) {
  g.n = 8;
  g.topo = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--minutes") == 0 && i + 1 < argc)
      *minutes = atof(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      g.n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      *seed = (unsigned)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--wire-gap") == 0 && i + 1 < argc)
      *gap = atoi(argv[++i]);
    else if (strcmp(argv[i], "--faults") == 0 && i + 1 < argc) {
      if (parse_only(argv[++i]) != 0)
        return usage(), -1;
    } else if (strcmp(argv[i], "--topology") == 0 && i + 1 < argc) {
      i++;
      for (int t = 0; t < 4; t++)
        if (strcmp(argv[i], g_topo_names[t]) == 0)
          g.topo = t;
      if (g.topo < 0)
        g.topo = 99;
    } else if (strcmp(argv[i], "--keep") == 0)
      *keep = 1;
    else
      g.topo = 99;
  }
  if (g.topo < 0)
    g.topo = SOAK_STANDALONE;
  if (g.topo == 99)
    return usage(), -1;
  if (g.topo == SOAK_ETCD) /* the wire adversary speaks RESP, etcd HTTP */
    g.only_wire = 0;
  if (g.n < 2 || g.n > SOAK_MAX_WORKERS || *minutes <= 0 || *gap < 10) {
    fprintf(stderr,
            "dlock_soak: 2 to %d workers, minutes > 0, a wire gap "
            "of 10 ms or more\n",
            SOAK_MAX_WORKERS);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 8 && strcmp(argv[1], "--worker") == 0) {
    char p[512];
    snprintf(p, sizeof p, "%s/shared", argv[5]);
    soak_shared *sh = soak_map(p, 0);
    return sh ? soak_worker(atoi(argv[2]), argv[3], argv[4], argv[5],
                            atoi(argv[6]), atoi(argv[7]), sh)
              : 2;
  }
  if (argc == 3 && strcmp(argv[1], "--check-only") == 0) {
    /* The checker alone over a kept run's logs (stores not read). */
    int problems = soak_check(argv[2], NULL, 0);
    printf("RESULT: %s (%d problems)\n", problems ? "FAIL" : "PASS", problems);
    return problems ? 1 : 0;
  }
  const char *env_min = getenv("SOAK_MINUTES");
  double minutes = env_min ? atof(env_min) : 10;
  unsigned seed = (unsigned)time(NULL);
  int keep = 0, gap = 1500;
  if (parse_args(argc, argv, &minutes, &seed, &keep, &gap) != 0)
    return 64;
  for (int i = 0; i < g.n; i++)
    g.nasync += is_async(i);
  srand(seed);
  signal(SIGPIPE, SIG_IGN);
  wire_setup(flog, seed, gap);
  if (setup() != 0) {
    fprintf(stderr, "dlock_soak: %s setup failed (%s); see %s\n",
            g_topo_names[g.topo], strerror(errno), g.dir);
    stop_servers(0);
    return 2;
  }
  int kinds[NFAULTS], nk = 0;
  for (int k = 0; g_topo_faults[g.topo][k] >= 0; k++)
    if (g.only_faults & (1 << g_topo_faults[g.topo][k]))
      kinds[nk++] = g_topo_faults[g.topo][k];
  printf("soak: %.1f min, topology %s, %d workers (%d on the event-loop "
         "client), seed %u, lease %d ms, hang bound %lld ms; logs in %s\n",
         minutes, g_topo_names[g.topo], g.n, g.nasync, seed, SOAK_LEASE_MS,
         (long long)soak_hang_ms(g.topo), g.dir);
  printf("soak: schedule faults:");
  for (int k = 0; k < nk; k++)
    printf(" %s", soak_fault_classes[kinds[k]]);
  printf("; wire adversary:");
  for (int k = 0; k < 3; k++)
    if (g.only_wire & (1 << k))
      printf(" %s", g_wire_names[k]);
  if (g.topo == SOAK_ETCD)
    printf(" none (a Redis-protocol proxy: not in front of etcd)\n");
  else
    printf(" (a fault every %d ms on average)\n", gap);
  if (g.topo != SOAK_STANDALONE)
    printf("soak: %s%s\n", g.url,
           g.topo == SOAK_SENTINEL
               ? ", sync_replicas 2 (every replica); the counting kinds are "
                 "left out here (their counts are not covered by replica "
                 "sync: docs/guarantees.md)"
           : g.topo == SOAK_ETCD
               ? ", 3 members, fsync on; mutex, fair, fenced and expirable "
                 "permits only (the other kinds and the event-loop client "
                 "answer DLOCK_ENOTSUP on etcd: docs/etcd.md); session lease "
                 "= the watchdog lease; the fenced store on a redis-server"
               : ", 3 masters, no replicas, appendfsync always");
  if (g.topo == SOAK_ETCD && soak_etcd_note())
    printf("soak: %s\n", soak_etcd_note());
  fflush(stdout);
  const char *locks[16];
  int nl = 0;
  for (int i = 0; i < soak_nresources && nl < 16; i++)
    if (soak_res_in(i, g.topo) && soak_res_of_lock(soak_resources[i].lock) == i)
      locks[nl++] = soak_resources[i].lock;
  wire_locks(locks, nl);
  wire_enable(g.only_wire & WIRE_ALL);
  for (int i = 0; i < g.n; i++)
    spawn_worker(i);
  run(minutes, kinds, nk);
  finish();
  final_counts();
  printf("faults:");
  for (int k = 0; k < nk; k++)
    printf(" %s %ld%s", soak_fault_classes[kinds[k]], g.counts[kinds[k]],
           k + 1 < nk || g.topo != SOAK_ETCD ? "," : "\n");
  if (g.topo == SOAK_ETCD && nk == 0)
    printf(" none\n");
  if (g.topo != SOAK_ETCD)
    printf(" wire-late %ld, wire-reply %ld, wire-cut %ld\n",
           wire_count(WIRE_LATE), wire_count(WIRE_REPLY), wire_count(WIRE_CUT));
  printf("fenced holders paused past their lease mid-section: %d\n",
         g.paused_in_cs);
  int problems = soak_check(g.dir, g.r.url, g.paused_in_cs);
  printf("RESULT: %s (%d problems)\n", problems ? "FAIL" : "PASS", problems);
  stop_servers(!keep && !problems);
  pthread_mutex_lock(&g.flog_mu);
  fclose(g.faults);
  g.faults = NULL;
  pthread_mutex_unlock(&g.flog_mu);
  return problems ? 1 : 0;
}
