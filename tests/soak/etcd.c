/*
 * etcd.c -- the soak's etcd topology (soak.h, SOAK_ETCD): three etcd
 * members of one private cluster (tools/common/etcd_spawn.h: free loopback
 * ports, a directory each under the run's, fsync on as in production and
 * the lab), and the faults only etcd has:
 *
 *   etcd-leader-kill  kill -9 of the leader; the others elect a new one
 *                     (bounded wait), then the killed member is started
 *                     again on its ports and data dir and rejoins (it
 *                     answers a linearizable read: bounded wait);
 *   etcd-member-stop  SIGSTOP of a member, half the time the leader,
 *                     else a follower, for 0.5-3 s (a leader is then
 *                     usually replaced: the pause outlasts the election
 *                     timeout); SIGCONT, then the member must answer again
 *                     (bounded). On an etcd older than 3.4.28 (3.5: 3.5.11)
 *                     a LEADER is paused 0.2-0.7 s only, under the
 *                     election timeout: there an old leader resumed after
 *                     a new one took over still revokes the leases that
 *                     expired in its view, and its proposals are forwarded
 *                     to the new leader and committed -- live sessions'
 *                     keys vanish while their holders' local deadlines
 *                     run, two holders (etcd-io/etcd#15247, fixed by
 *                     etcd-io/etcd#16822; the first 10-minute soak here
 *                     met it on etcd 3.4.23). Not a defect dlock can
 *                     mend: the holder's own-key watch reports it, the
 *                     fencing token stops the stale write.
 *
 * The wire adversary (wire.c) is a Redis-protocol proxy and is not put in
 * front of etcd: etcd's members speak HTTP (its v3 JSON gateway), so the
 * faults on the way to etcd here are the members' own (a dead member
 * refuses, a stopped one accepts and never answers).
 *
 * The kill -9 of a worker inside its unlock is judged by asking etcd
 * whether the hold's key is still there (soak_etcd_has_field: a key of
 * the lock whose value is the hold's "<client id>:<tid>").
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etcd_spawn.h"
#include "soak.h"

static dlc_etcd g_m[3];
static int g_started;
static int g_major, g_minor, g_patch; /* `etcd --version` */

/* 1 when the installed etcd ignores an old leader's lease revokes
 * (etcd-io/etcd#16822: 3.4.28, 3.5.11, 3.6). */
static int stale_revokes_fixed(void) {
  if (g_major != 3)
    return g_major > 3;
  return g_minor >= 6 || (g_minor == 5 && g_patch >= 11) ||
         (g_minor == 4 && g_patch >= 28);
}

static void read_version(void) {
  FILE *f = popen("etcd --version 2>/dev/null", "r");
  char ln[256];
  while (f && fgets(ln, sizeof ln, f))
    if (sscanf(ln, "etcd Version: %d.%d.%d", &g_major, &g_minor, &g_patch) == 3)
      break;
  if (f)
    pclose(f);
}

const char *soak_etcd_note(void) {
  static char note[320];
  if (stale_revokes_fixed())
    return NULL;
  snprintf(note, sizeof note,
           "etcd %d.%d.%d: a paused leader is resumed within the election "
           "timeout (an old leader revokes leases after it stepped down "
           "before 3.4.28/3.5.11: etcd-io/etcd#15247)",
           g_major, g_minor, g_patch);
  return note;
}

static void nap_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* The leader's index, waiting (bounded by ms) for one; -1 none. */
static int leader_wait(int64_t ms) {
  int64_t end = soak_now_us() + ms * 1000;
  do {
    int l = dlc_etcd_leader(g_m, 3);
    if (l >= 0)
      return l;
    nap_ms(50);
  } while (soak_now_us() < end);
  return -1;
}

int soak_etcd_setup(const char *dir, char *url, size_t cap) {
  if (!dlc_etcd_installed()) {
    fprintf(stderr, "dlock_soak: etcd is not installed "
                    "(scripts/install-deps.sh)\n");
    return -1;
  }
  g_started = 1;
  read_version();
  if (dlc_etcd_cluster(g_m, 3, dir, 0) != 0 || leader_wait(30000) < 0)
    return -1;
  char eps[256];
  dlc_etcd_endpoints(g_m, 3, eps, sizeof eps);
  snprintf(url, cap, "etcd://%s", eps);
  return 0;
}

int soak_etcd_leader_kill(char *d, size_t dn) {
  int l = leader_wait(10000);
  if (l < 0) {
    snprintf(d, dn, "-1 no-leader");
    return -1;
  }
  int64_t t0 = soak_now_us();
  dlc_etcd_kill(&g_m[l]);
  int nl = leader_wait(30000); /* among the two left */
  int64_t elected = soak_now_us();
  if (nl < 0 || dlc_etcd_restart(&g_m[l]) != 0 ||
      dlc_etcd_wait_ready(&g_m[l], 30000) != 0) {
    fprintf(stderr,
            "soak: etcd member %s: no new leader (%d) or no rejoin "
            "within 30 s (see %s/etcd.log)\n",
            g_m[l].name, nl, g_m[l].dir);
    return -2;
  }
  snprintf(d, dn, "%d member=%s new-leader=%s elected_ms=%lld rejoin_ms=%lld",
           l, g_m[l].name, g_m[nl].name, (long long)(elected - t0) / 1000,
           (long long)(soak_now_us() - elected) / 1000);
  return l;
}

int soak_etcd_member_stop(char *d, size_t dn) {
  int l = leader_wait(10000), k;
  if (l >= 0 && rand() % 2)
    k = l;
  else
    k = l >= 0 ? (l + 1 + rand() % 2) % 3 : rand() % 3;
  int ms = k == l && !stale_revokes_fixed() ? 200 + rand() % 500
                                            : 500 + rand() % 2500;
  dlc_etcd_pause(&g_m[k]);
  nap_ms(ms);
  dlc_etcd_resume(&g_m[k]);
  if (dlc_etcd_wait_ready(&g_m[k], 30000) != 0) {
    fprintf(stderr,
            "soak: etcd member %s did not answer 30 s after its "
            "SIGCONT (see %s/etcd.log)\n",
            g_m[k].name, g_m[k].dir);
    return -2;
  }
  int nl = leader_wait(10000);
  snprintf(d, dn, "%d member=%s role=%s ms=%d leader-after=%s", k, g_m[k].name,
           k == l ? "leader" : "follower", ms, nl >= 0 ? g_m[nl].name : "-");
  return k;
}

static void b64(const char *s, char *out, size_t cap) {
  size_t n = strlen(s);
  if (4 * ((n + 2) / 3) + 1 > cap) {
    out[0] = '\0';
    return;
  }
  EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
}

int soak_etcd_has_field(const char *lock, const char *field) {
  char from[128], to[128], k[200], e[200], v[200], body[512], out[65536];
  /* the lock's keys: "<lock>/<lease hex>" ('0' follows '/') */
  snprintf(from, sizeof from, "%s/", lock);
  snprintf(to, sizeof to, "%s0", lock);
  b64(from, k, sizeof k);
  b64(to, e, sizeof e);
  b64(field, v, sizeof v);
  if (!k[0] || !e[0] || !v[0])
    return -1;
  snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\"}", k, e);
  char want[260];
  snprintf(want, sizeof want, "\"value\":\"%s\"", v);
  for (int i = 0; i < 3; i++) {
    if (g_m[i].pid <= 1 || g_m[i].paused)
      continue;
    /* linearizable (the default): what a quorum has */
    if (dlc_etcd_post(g_m[i].port, "/v3/kv/range", body, out, sizeof out,
                      3000) == 200)
      return strstr(out, want) != NULL;
  }
  return -1;
}

void soak_etcd_stop(int remove) {
  for (int i = 0; g_started && i < 3; i++) {
    if (remove)
      dlc_etcd_remove(&g_m[i]);
    else
      dlc_etcd_kill(&g_m[i]);
  }
}
