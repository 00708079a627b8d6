/*
 * scen_etcd.c -- the etcd store's rows (issue 42): what a CP lock costs,
 * measured beside the Redis rows of the same run.
 *
 * uncontended: one thread; pairs of dlock_mutex_lock + unlock on one name
 *   through an etcd:// client, interleaved in blocks with THE FLOOR: the
 *   same two requests sent with plain libcurl on one keep-alive connection
 *   (a txn that creates the key under a lease if absent, then a delete) --
 *   what any lock on etcd's JSON gateway costs per pair, before a library.
 *   The goal is the library's p50 <= 1.2 x the floor's.
 * contended: --workers processes, each its own client, on ONE lock for
 *   --contended-secs; inside the lock a non-atomic read-increment-write of a
 *   counter in shared memory (a broken exclusion loses updates): acq/s,
 *   time-to-acquire p50/p99/max.
 *
 * The member is private (a free loopback port, its own directory, fsync on:
 * production's cost) unless --etcd-url gives one; without etcd installed
 * the scenario is a note and its target rows show SKIP.
 */
#include <curl/curl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "bench.h"
#include "dlock.h"
#include "etcd_spawn.h"

#define SCEN "etcd"
#define BLOCK 50 /* pairs per interleaved block */

static dlc_etcd g_member;
static char g_url[128];

/* The etcd URL: --etcd-url, or a private member. NULL (noted) without. */
static const char *etcd_url(const bench_opts *o) {
  if (o->etcd_url[0])
    return o->etcd_url;
  if (g_url[0])
    return g_url;
  if (!dlc_etcd_installed()) {
    bm_note("etcd: not run (etcd is not installed: scripts/install-deps.sh, "
            "or give --etcd-url)");
    return NULL;
  }
  const char *tmp = getenv("TMPDIR");
  if (dlc_etcd_single(&g_member, tmp && *tmp ? tmp : "/tmp", 0) != 0) {
    bm_note("etcd: the private member did not start (%s/etcd.log)",
            g_member.dir);
    return NULL;
  }
  snprintf(g_url, sizeof g_url, "etcd://%s", g_member.ep);
  return g_url;
}

void bench_etcd_stop(void) { dlc_etcd_remove(&g_member); }

/* ---- the floor: plain libcurl
 * ------------------------------------------------ */

typedef struct raw {
  CURL *k;
  struct curl_slist *h;
  char base[128];
  char buf[4096];
  size_t n;
} raw;

static size_t raw_write(char *p, size_t s, size_t m, void *arg) {
  raw *r = arg;
  size_t n = s * m;
  size_t room = sizeof r->buf - 1 - r->n;
  memcpy(r->buf + r->n, p, n < room ? n : room);
  r->n += n < room ? n : room;
  r->buf[r->n] = '\0';
  return n;
}

/* One POST on the keep-alive connection; exits on a failure. */
static void raw_post(raw *r, const char *path, const char *body) {
  char url[256];
  snprintf(url, sizeof url, "%s%s", r->base, path);
  r->n = 0;
  curl_easy_setopt(r->k, CURLOPT_URL, url);
  curl_easy_setopt(r->k, CURLOPT_POSTFIELDS, body);
  CURLcode cc = curl_easy_perform(r->k);
  long http = 0;
  curl_easy_getinfo(r->k, CURLINFO_RESPONSE_CODE, &http);
  if (cc != CURLE_OK || http != 200)
    bench_die("etcd floor %s: %s (HTTP %ld) %s", path, curl_easy_strerror(cc),
              http, r->buf);
}

static void raw_open(raw *r, const char *url) {
  memset(r, 0, sizeof *r);
  const char *hp = strstr(url, "://");
  snprintf(r->base, sizeof r->base, "http://%s", hp ? hp + 3 : url);
  char *comma = strchr(r->base, ',');
  if (comma)
    *comma = '\0';
  r->k = curl_easy_init();
  r->h = curl_slist_append(NULL, "Content-Type: application/json");
  r->h = curl_slist_append(r->h, "Expect:");
  if (!r->k || !r->h)
    bench_die("libcurl: out of memory");
  curl_easy_setopt(r->k, CURLOPT_HTTPHEADER, r->h);
  curl_easy_setopt(r->k, CURLOPT_WRITEFUNCTION, raw_write);
  curl_easy_setopt(r->k, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(r->k, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(r->k, CURLOPT_TIMEOUT_MS, 10000L);
}

static void raw_close(raw *r) {
  curl_slist_free_all(r->h);
  curl_easy_cleanup(r->k);
}

static void b64(const char *s, char *out) {
  EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s,
                  (int)strlen(s));
}

/* The floor's pair bodies: a txn creating key under lease if absent, then
 * its delete. */
typedef struct raw_pair {
  char txn[1024], del[512];
} raw_pair;

static void raw_pair_init(raw *r, const bench_opts *o, raw_pair *p) {
  raw_post(r, "/v3/lease/grant", "{\"TTL\":60}");
  const char *id = strstr(r->buf, "\"ID\":\"");
  if (!id)
    bench_die("etcd floor: no lease in %s", r->buf);
  long long lease = atoll(id + 6);
  char key[128], k64[200];
  snprintf(key, sizeof key, "%s:floor/%llx", o->run_id, lease);
  b64(key, k64);
  snprintf(p->txn, sizeof p->txn,
           "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":"
           "\"EQUAL\",\"create_revision\":\"0\"}],\"success\":[{"
           "\"request_put\":{\"key\":\"%s\",\"value\":\"eA==\",\"lease\":"
           "\"%lld\"}}]}",
           k64, k64, lease);
  snprintf(p->del, sizeof p->del, "{\"key\":\"%s\"}", k64);
}

/* ---- uncontended
 * ------------------------------------------------------------- */

static void uncontended(const bench_opts *o, const char *url) {
  long n = o->quick ? 200 : (o->pairs < 1000 ? o->pairs : 1000);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    bench_die("etcd client %s: %s", url, dlock_last_error());
  char name[96];
  snprintf(name, sizeof name, "%s:etcd-pair", o->run_id);
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(c, name, &m))
    bench_die("dlock_mutex_new: %s", dlock_last_error());
  raw r;
  raw_open(&r, url);
  raw_pair rp;
  raw_pair_init(&r, o, &rp);
  bench_samples lib, flo;
  bs_init(&lib);
  bs_init(&flo);
  double cpu0 = 0, cpu = 0;
  for (long done = 0; done < n; done += BLOCK) {
    cpu0 = bench_cpu_us();
    for (int i = 0; i < BLOCK; i++) {
      int64_t t0 = dlc_now_ns();
      if ((rc = dlock_mutex_lock(m)) != 0 || (rc = dlock_mutex_unlock(m)) != 0)
        bench_die("etcd pair: %s: %s", dlock_err_name(rc), dlock_last_error());
      bs_add(&lib, (double)(dlc_now_ns() - t0) / 1e3);
    }
    cpu += bench_cpu_us() - cpu0;
    for (int i = 0; i < BLOCK; i++) {
      int64_t t0 = dlc_now_ns();
      raw_post(&r, "/v3/kv/txn", rp.txn);
      raw_post(&r, "/v3/kv/deleterange", rp.del);
      bs_add(&flo, (double)(dlc_now_ns() - t0) / 1e3);
    }
  }
  bm_put(SCEN, "pair_p50_us", "etcd lock+unlock pair p50", bs_pct(&lib, 50),
         "us");
  bm_put(SCEN, "pair_p99_us", "etcd lock+unlock pair p99", bs_pct(&lib, 99),
         "us");
  bm_put(SCEN, "floor_p50_us",
         "etcd floor: libcurl txn + delete pair p50, interleaved",
         bs_pct(&flo, 50), "us");
  bm_put(SCEN, "floor_p99_us", "etcd floor pair p99", bs_pct(&flo, 99), "us");
  bm_put(SCEN, "pair_cpu_us", "etcd client CPU per pair (whole process)",
         cpu / (double)lib.n, "us");
  bm_put(SCEN, "pairs", "etcd pairs measured (each side)", (double)lib.n,
         "pairs");
  bs_free(&lib);
  bs_free(&flo);
  raw_close(&r);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- contended --------------------------------------------------------------
 */

#define MAXW 64
typedef struct ec_shared {
  atomic_int ready, go;
  _Atomic int64_t until;
  long long counter; /* read-increment-write under the lock */
  long cap;
  struct {
    long count, nsamples;
    char err[160];
  } w[MAXW];
  float samples[];
} ec_shared;

typedef struct ec_arg {
  const char *url;
  char lock[96];
  ec_shared *sh;
} ec_arg;

static void ec_worker(int i, void *p) {
  ec_arg *a = p;
  ec_shared *sh = a->sh;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = a->url;
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new(c, a->lock, &m))
    _exit(1);
  float *samples = sh->samples + (size_t)i * (size_t)sh->cap;
  bench_worker_ready(&sh->ready, &sh->go);
  int64_t until = atomic_load(&sh->until);
  long n = 0;
  for (;;) {
    int64_t t0 = dlc_now_ns();
    int rc = dlock_mutex_lock(m);
    int64_t t1 = dlc_now_ns();
    if (rc) {
      snprintf(sh->w[i].err, sizeof sh->w[i].err, "lock: %s: %s",
               dlock_err_name(rc), dlock_last_error());
      break;
    }
    long long v = sh->counter;
    sh->counter = v + 1;
    if ((rc = dlock_mutex_unlock(m)) != 0) {
      snprintf(sh->w[i].err, sizeof sh->w[i].err, "unlock: %s: %s",
               dlock_err_name(rc), dlock_last_error());
      n++;
      break;
    }
    if (n < sh->cap)
      samples[n] = (float)((double)(t1 - t0) / 1e3);
    n++;
    if (t1 >= until)
      break;
  }
  sh->w[i].count = n;
  sh->w[i].nsamples = n < sh->cap ? n : sh->cap;
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static void contended(const bench_opts *o, const char *url) {
  int workers = o->workers > MAXW ? MAXW : o->workers;
  double secs = o->contended_secs;
  long cap = (long)(secs * 2000) + 100;
  size_t shsz = sizeof(ec_shared) + (size_t)workers * (size_t)cap * 4;
  ec_shared *sh = bench_shm(shsz);
  sh->cap = cap;
  atomic_store(&sh->until, INT64_MAX);
  ec_arg a = {url, "", sh};
  snprintf(a.lock, sizeof a.lock, "%s:etcd-contended", o->run_id);
  int *pids = bench_fork(workers, ec_worker, &a);
  int64_t end = dlc_now_ns() + (int64_t)60e9;
  while (atomic_load(&sh->ready) < workers && dlc_now_ns() < end)
    dlc_sleep_ns(1000000);
  int64_t t0 = dlc_now_ns();
  atomic_store(&sh->until, t0 + (int64_t)(secs * 1e9));
  atomic_store(&sh->go, 1);
  int failed = bench_reap(pids, workers, t0 + (int64_t)((secs + 60) * 1e9));
  double t = (double)(dlc_now_ns() - t0) / 1e9;
  long total = 0;
  bench_samples acq;
  bs_init(&acq);
  for (int i = 0; i < workers; i++) {
    total += sh->w[i].count;
    bs_add_many(&acq, sh->samples + (size_t)i * (size_t)cap,
                (size_t)sh->w[i].nsamples);
    if (sh->w[i].err[0])
      bm_note("etcd contended worker %d: %s", i, sh->w[i].err);
  }
  if (failed)
    bm_note("etcd contended: %d of %d workers failed", failed, workers);
  char lab[96];
  snprintf(lab, sizeof lab, "etcd contended, %d workers: acq/s", workers);
  bm_put(SCEN, "acq_per_s", lab, (double)total / t, "acq/s");
  bm_put(SCEN, "acq_p50_ms", "etcd contended time-to-acquire p50",
         bs_pct(&acq, 50) / 1e3, "ms");
  bm_put(SCEN, "acq_p99_ms", "etcd contended time-to-acquire p99",
         bs_pct(&acq, 99) / 1e3, "ms");
  bm_put(SCEN, "acq_max_ms", "etcd contended time-to-acquire max",
         bs_max(&acq) / 1e3, "ms");
  bm_put(SCEN, "lost", "etcd contended lost updates",
         (double)(total - sh->counter), "updates");
  bs_free(&acq);
  bench_shm_free(sh, shsz);
}

void scen_etcd(const bench_opts *o) {
  const char *url = etcd_url(o);
  if (!url)
    return;
  bench_log("etcd: %s", url);
  uncontended(o, url);
  contended(o, url);
  double lib = bm_get(SCEN, "pair_p50_us"),
         redis = bm_get("uncontended", "same_p50_us");
  double er = bm_get(SCEN, "acq_per_s"), rr = bm_get("contended", "acq_per_s");
  if (!isnan(redis) && !isnan(rr))
    bm_note("what CP costs here: a lock+unlock pair %.2f ms on etcd against "
            "%.3f ms on Redis (x%.0f); %d workers on one lock %.0f acq/s "
            "against %.0f (max wait %.0f ms against %.1f ms)",
            lib / 1e3, redis / 1e3, lib / redis, o->workers, er, rr,
            bm_get(SCEN, "acq_max_ms"), bm_get("contended", "acquire_max_ms"));
}
