/*
 * th_etcd.c -- see th_etcd.h: etcd members for the test cases, tracked by
 * the harness.
 */
#include "th_etcd.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dlc_etcd g_members[8];
static int g_used;

void th_etcd_require(int need_ctl) {
  if (!dlc_etcd_installed())
    th_skip("etcd is not installed (apt-get install etcd-server: "
            "scripts/install-deps.sh)");
  if (need_ctl && !dlc_etcd_ctl_installed())
    th_skip("etcdctl is not installed (apt-get install etcd-client: "
            "scripts/install-deps.sh)");
}

static void track(dlc_etcd *m) {
  char log[sizeof m->dir + 16];
  snprintf(log, sizeof log, "%s/etcd.log", m->dir);
  th_track(m->pid, log);
}

static const char *parent_dir(void) {
  static char dir[256];
  snprintf(dir, sizeof dir, "%s", th_tmpfile(""));
  size_t l = strlen(dir);
  if (l && dir[l - 1] == '/')
    dir[l - 1] = '\0';
  return dir;
}

dlc_etcd *th_etcd_cluster(int n) {
  th_etcd_require(0);
  if (n < 1 || g_used + n > 8)
    th_fail(__FILE__, __LINE__, "too many etcd members in one case");
  dlc_etcd *m = &g_members[g_used];
  g_used += n;
  int rc = dlc_etcd_cluster(m, n, parent_dir(), 1);
  for (int i = 0; i < n; i++)
    if (m[i].pid > 1)
      track(&m[i]);
  if (rc != 0)
    th_fail(__FILE__, __LINE__, "%d etcd member(s) did not start (logs above)",
            n);
  return m;
}

dlc_etcd *th_etcd_new(void) { return th_etcd_cluster(1); }

dlc_etcd *th_etcd_new_tls(const th_certs *k, int mutual) {
  th_etcd_require(0);
  if (g_used + 1 > 8)
    th_fail(__FILE__, __LINE__, "too many etcd members in one case");
  dlc_etcd *m = &g_members[g_used++];
  int rc = dlc_etcd_single_tls(m, parent_dir(), k->srv_crt, k->srv_key,
                               mutual ? k->ca : NULL);
  if (m->pid > 1)
    track(m);
  if (rc != 0)
    th_fail(__FILE__, __LINE__, "the TLS etcd member did not start");
  return m;
}

const char *th_etcd_url(const dlc_etcd *m, int n, const char *tail) {
  static char urls[4][1024];
  static int k;
  char *u = urls[k++ % 4];
  char eps[900];
  dlc_etcd_endpoints(m, n, eps, sizeof eps);
  snprintf(u, sizeof urls[0], "etcd://%s%s", eps, tail ? tail : "");
  return u;
}

dlock_client *th_etcd_client(const char *url, int lease_ms,
                             const dlock_config *cfg_in) {
  dlock_config cfg;
  if (cfg_in)
    cfg = *cfg_in;
  else
    dlock_config_init(&cfg);
  cfg.url = url;
  if (!cfg_in) {
    cfg.connect_timeout_ms = 1000;
    cfg.command_timeout_ms = 2000 * th_timeout_mult();
    cfg.retry_attempts = 2;
    cfg.retry_interval_ms = 200;
  }
  cfg.watchdog_timeout_ms = lease_ms;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_client_new(%s): %s: %s", url,
            dlock_err_name(rc), dlock_last_error());
  return c;
}

void th_etcd_kill(dlc_etcd *m) {
  th_untrack(m->pid);
  dlc_etcd_kill(m);
}

void th_etcd_restart(dlc_etcd *m) {
  th_untrack(m->pid);
  if (dlc_etcd_restart(m) != 0)
    th_fail(__FILE__, __LINE__, "etcd member %s did not restart", m->name);
  track(m);
}

void th_etcd_pause(dlc_etcd *m) { dlc_etcd_pause(m); }
void th_etcd_resume(dlc_etcd *m) { dlc_etcd_resume(m); }

int th_etcd_leader(const dlc_etcd *m, int n, int ms) {
  int64_t end = th_now_ms() + ms;
  while (th_now_ms() < end) {
    int l = dlc_etcd_leader(m, n);
    if (l >= 0)
      return l;
    th_sleep_ms(100);
  }
  return -1;
}

static void b64(const char *s, char *out, size_t cap) {
  size_t n = strlen(s);
  if (4 * ((n + 2) / 3) + 1 > cap)
    th_fail(__FILE__, __LINE__, "key too long");
  EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
}

long long th_etcd_count(const dlc_etcd *m, int n, const char *prefix,
                        int serial) {
  char k[512], e[512], end[256], body[1200], out[4096];
  snprintf(end, sizeof end, "%s", prefix);
  size_t l = strlen(end);
  if (l == 0)
    th_fail(__FILE__, __LINE__, "th_etcd_count: empty prefix");
  end[l - 1]++;
  b64(prefix, k, sizeof k);
  b64(end, e, sizeof e);
  snprintf(body, sizeof body,
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true%s}", k, e,
           serial ? ",\"serializable\":true" : "");
  for (int i = 0; i < n; i++) {
    if (m[i].pid <= 1 || m[i].paused)
      continue;
    if (dlc_etcd_post(m[i].port, "/v3/kv/range", body, out, sizeof out,
                      3000 * th_timeout_mult()) != 200)
      continue;
    const char *c = strstr(out, "\"count\":\"");
    return c ? atoll(c + 9) : 0;
  }
  return -1;
}

void th_etcd_put(const dlc_etcd *m, const char *key, const char *value) {
  char k[512], v[512], body[1100], out[1024];
  b64(key, k, sizeof k);
  b64(value, v, sizeof v);
  snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\"}", k, v);
  if (dlc_etcd_post(m->port, "/v3/kv/put", body, out, sizeof out, 5000) != 200)
    th_fail(__FILE__, __LINE__, "put %s on %s failed: %s", key, m->ep, out);
}
