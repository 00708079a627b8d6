/*
 * th_etcd.h -- real etcd members for the test cases (the shared spawner,
 * tools/common/etcd_spawn.h): started in the case's temp dir on free
 * loopback ports, tracked by the harness (th_track: killed however the case
 * ends, their log's tail printed when it fails), --unsafe-no-fsync (these
 * are unit tests; the lab runs without it). A case SKIPs (exit 77) with the
 * reason when etcd is not installed (scripts/install-deps.sh).
 */
#ifndef DLOCK_TH_ETCD_H
#define DLOCK_TH_ETCD_H

#include "etcd_spawn.h"
#include "th.h"

/* SKIP unless etcd (and, need_ctl, etcdctl) is installed. */
void th_etcd_require(int need_ctl);
/* One private member, ready. Fails the case if it does not start. */
dlc_etcd *th_etcd_new(void);
/* One member serving TLS with the certificates of k (th_make_certs);
 * mutual: it requires a client certificate signed by k's CA. */
dlc_etcd *th_etcd_new_tls(const th_certs *k, int mutual);
/* n (<= 5) members of one cluster, ready, a leader elected. */
dlc_etcd *th_etcd_cluster(int n);
/* "etcd://h:p[,h:p...]" + tail ("" or "/prefix", "?tls=1"...) into a
 * buffer of the harness's (valid until the case ends). */
const char *th_etcd_url(const dlc_etcd *m, int n, const char *tail);
/* A client on url with test-friendly settings: short timeouts, the given
 * session lease (watchdog_timeout_ms, whole seconds >= 2000). cfg_in may be
 * NULL. Fails the case on an error. */
dlock_client *th_etcd_client(const char *url, int lease_ms,
                             const dlock_config *cfg_in);
/* The fault hooks, tracked: kill -9, restart (same ports and data),
 * SIGSTOP (waits for state T), SIGCONT. */
void th_etcd_kill(dlc_etcd *m);
void th_etcd_restart(dlc_etcd *m);
void th_etcd_pause(dlc_etcd *m);
void th_etcd_resume(dlc_etcd *m);
/* The leader's index among n members, waiting (bounded by ms) for one. */
int th_etcd_leader(const dlc_etcd *m, int n, int ms);
/* How many keys start with prefix (one read on any running member of n;
 * serializable reads too when no member has a quorum: serial 1). -1 when
 * no member answered. */
long long th_etcd_count(const dlc_etcd *m, int n, const char *prefix,
                        int serial);
/* Puts key=value (no lease) through member m. Fails the case otherwise. */
void th_etcd_put(const dlc_etcd *m, const char *key, const char *value);

#endif
