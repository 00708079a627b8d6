/*
 * etcd_spawn.h -- private etcd members, for the tests, the lab
 * (dlock-seckill's failover scenario) and dlock-bench: a member in its own
 * directory (data and log), on free loopback ports (client and peer),
 * alone or as one of a cluster; a bounded readiness wait (a linearizable
 * read answered: the member has a leader); SIGKILL by pid (one member took
 * more than 5 s to leave after SIGTERM: research/etcd.md), SIGSTOP and
 * SIGCONT; the leader found by /v3/maintenance/status. Members die with
 * the process that started them (parent-death signal). Plain sockets, no
 * libcurl: the tools and tests that use it test the library's transport.
 */
#ifndef DLOCK_COMMON_ETCD_SPAWN_H
#define DLOCK_COMMON_ETCD_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

typedef struct dlc_etcd {
  pid_t pid;
  char name[16];
  int port, peer_port; /* client, peer (loopback) */
  char dir[200];       /* its directory: data/ and etcd.log */
  char ep[32];         /* "127.0.0.1:<port>" */
  char cluster[1024];  /* --initial-cluster */
  int fast;            /* --unsafe-no-fsync (tests only) */
  int paused;
  /* TLS on the client port when cert is set (dlc_etcd_single_tls): the
   * server's certificate and key, and the CA clients must present
   * certificates of (mutual TLS) */
  char cert[256], key[256], client_ca[256];
} dlc_etcd;

/* 1 if the etcd binary is installed (etcd-server). */
int dlc_etcd_installed(void);
/* 1 if etcdctl is installed (etcd-client). */
int dlc_etcd_ctl_installed(void);

/* One member alone: a directory under parent, free ports, started and
 * ready (bounded: 20 s). fast: --unsafe-no-fsync. 0, or -1 (its log in
 * m->dir/etcd.log says why). */
int dlc_etcd_single(dlc_etcd *m, const char *parent, int fast);
/* One member alone serving TLS on its client port with cert and key
 * (PEM); client_ca (NULL: none) makes it require client certificates
 * signed by that CA. Ready when its port accepts connections and a little
 * more (the readiness read is plain HTTP). 0 or -1. */
int dlc_etcd_single_tls(dlc_etcd *m, const char *parent, const char *cert,
                        const char *key, const char *client_ca);
/* n members of one cluster, started and ready (a leader elected). 0 or
 * -1. */
int dlc_etcd_cluster(dlc_etcd *m, int n, const char *parent, int fast);
/* The endpoints of n members as "h:p,h:p,...", into buf. */
void dlc_etcd_endpoints(const dlc_etcd *m, int n, char *buf, size_t cap);

/* SIGKILL now, reaped. */
void dlc_etcd_kill(dlc_etcd *m);
/* Starts a killed member again on its ports and data (bounded; the
 * cluster may have no quorum yet: it only waits for the port). 0 or -1. */
int dlc_etcd_restart(dlc_etcd *m);
void dlc_etcd_pause(dlc_etcd *m);  /* SIGSTOP, and waits for state T */
void dlc_etcd_resume(dlc_etcd *m); /* SIGCONT */
/* Waits (bounded by ms) until m answers a linearizable read: 0 or -1. */
int dlc_etcd_wait_ready(dlc_etcd *m, int ms);
/* The index of the leader among the n members (asked of each running
 * one), or -1. */
int dlc_etcd_leader(const dlc_etcd *m, int n);
/* Stops and removes the directory. */
void dlc_etcd_remove(dlc_etcd *m);

/* One request to a member's gateway (POST path with body, JSON), its
 * answer's body into out (cap bytes, NUL-terminated). The HTTP status, or
 * -1 (no connection / no answer within ms). */
int dlc_etcd_post(int port, const char *path, const char *body, char *out,
                  size_t cap, int ms);

#endif
