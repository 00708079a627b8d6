/*
 * etcd_admin.c -- `dlock list` on an etcd:// URL. The Redis commands of
 * list.c scan a Redis keyspace over plain hiredis connections; on etcd the
 * library answers the same questions itself (dlock_lock_names_query,
 * dlock_status_query, dlock_fair_waiters_query: one linearizable read
 * each), so this file only prints. `dlock status` and `dlock unlock
 * --force` need nothing here: they use the library's calls, which the etcd
 * store answers (docs/etcd.md). `top` and `exporter` are Redis's for now:
 * they say so (exit 64) instead of scanning nothing.
 *
 * Hook: list.c's cli_obs_dispatch calls cli_etcd_obs when the resolved
 * URL is etcd:// or etcds://.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "etcd_admin.h"
#include "json.h"
#include "lockscan.h"

int cli_etcd_url(const char *url) {
  return url &&
         (strncmp(url, "etcd://", 7) == 0 || strncmp(url, "etcds://", 8) == 0);
}

/* One lock: its holder, TTL and waiters. */
typedef struct row {
  char *name;
  dlock_status st;
  char **waiters;
  size_t n_waiters;
} row;

static void row_free(row *r) {
  free(r->name);
  dlock_status_clear(&r->st);
  dlock_fair_waiters_free(r->waiters, r->n_waiters);
}

static void print_text(const row *rows, size_t n) {
  if (n == 0) {
    printf("no locks\n");
    return;
  }
  printf("%-32s %-48s %8s %7s\n", "NAME", "HOLDER", "TTL", "WAITERS");
  for (size_t i = 0; i < n; i++) {
    const row *r = &rows[i];
    char ttl[32];
    if (r->st.ttl_ms >= 0)
      cli_fmt_secs(r->st.ttl_ms, ttl, sizeof ttl);
    else
      snprintf(ttl, sizeof ttl, "-");
    printf("%-32s %-48s %7s%s %7zu\n", r->name,
           r->st.n_holders ? r->st.holders[0].owner : "(free)", ttl,
           r->st.ttl_ms >= 0 ? "s" : " ", r->n_waiters);
    for (size_t w = 0; w < r->n_waiters; w++)
      printf("  waiter %zu: %s\n", w + 1, r->waiters[w]);
  }
}

static void print_json(const row *rows, size_t n) {
  fputs("{\"store\":\"etcd\",\"locks\":[", stdout);
  for (size_t i = 0; i < n; i++) {
    const row *r = &rows[i];
    fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
    dlc_json_str(stdout, r->name);
    fputs(",\"holder\":", stdout);
    if (r->st.n_holders)
      dlc_json_str(stdout, r->st.holders[0].owner);
    else
      fputs("null", stdout);
    printf(",\"ttl_ms\":%lld,\"waiters\":[", r->st.ttl_ms);
    for (size_t w = 0; w < r->n_waiters; w++) {
      if (w)
        fputc(',', stdout);
      dlc_json_str(stdout, r->waiters[w]);
    }
    fputs("]}", stdout);
  }
  printf("],\"count\":%zu}\n", n);
}

/* The rows of every lock name (each read on its own: a lock freed between
 * the names' read and its own shows as free). 0 or a DLOCK_E* code. */
static int read_rows(dlock_client *c, const char *pattern, row **out,
                     size_t *n) {
  char **names = NULL;
  size_t nn = 0;
  int rc = dlock_lock_names_query(c, pattern, &names, &nn);
  if (rc)
    return rc;
  row *rows = nn ? calloc(nn, sizeof *rows) : NULL;
  if (nn && !rows) {
    dlock_fair_waiters_free(names, nn);
    return DLOCK_ENOMEM;
  }
  for (size_t i = 0; rc == 0 && i < nn; i++) {
    rows[i].name = names[i];
    names[i] = NULL;
    rc = dlock_status_query(c, rows[i].name, &rows[i].st);
    if (rc == 0)
      rc = dlock_fair_waiters_query(c, rows[i].name, &rows[i].waiters,
                                    &rows[i].n_waiters);
  }
  dlock_fair_waiters_free(names, nn);
  if (rc) {
    for (size_t i = 0; i < nn; i++)
      row_free(&rows[i]);
    free(rows);
    return rc;
  }
  *out = rows;
  *n = nn;
  return 0;
}

int cli_etcd_obs(const char *cmd, const char *pattern, int json, cli_opts *co) {
  if (strcmp(cmd, "list") != 0) {
    cli_err("'dlock %s' reads a Redis keyspace and is not offered on etcd "
            "yet: use 'dlock list' (names, holders, waiters, TTLs)",
            cmd);
    return CLI_EX_USAGE;
  }
  dlock_client *c = NULL;
  int ex = cli_connect(co, 0, -1, NULL, NULL, &c);
  if (ex)
    return ex;
  row *rows = NULL;
  size_t n = 0;
  int rc = read_rows(c, pattern, &rows, &n);
  if (rc) {
    char d[1024];
    cli_detail(cli_url(co), d, sizeof d);
    cli_err("list: %s", d);
    dlock_client_free(c);
    return cli_exit_code(rc);
  }
  if (json)
    print_json(rows, n);
  else
    print_text(rows, n);
  for (size_t i = 0; i < n; i++)
    row_free(&rows[i]);
  free(rows);
  dlock_client_free(c);
  return fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
}

int cli_etcd_read_lock(dlock_client *c, const char *name, ls_lock *lk) {
  memset(lk, 0, sizeof *lk);
  char **w = NULL;
  size_t n = 0;
  int rc = dlock_fair_waiters_query(c, name, &w, &n);
  if (rc < 0)
    return rc;
  lk->name = strdup(name);
  lk->kind = "mutex";
  lk->ttl_ms = -1;
  lk->waiters = n ? calloc(n, sizeof *lk->waiters) : NULL;
  if (!lk->name || (n && !lk->waiters)) {
    dlock_fair_waiters_free(w, n);
    ls_lock_free(lk);
    return DLOCK_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    snprintf(lk->waiters[i].owner, sizeof lk->waiters[i].owner, "%s", w[i]);
    lk->waiters[i].queue = "fair"; /* etcd: in order of creation */
  }
  lk->nwaiters = n;
  dlock_fair_waiters_free(w, n);
  return 0;
}
