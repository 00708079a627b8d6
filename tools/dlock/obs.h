/*
 * obs.h -- the operator's commands of the dlock CLI: `dlock list`, `dlock
 * top` (list.c) and `dlock exporter` (exporter.c), over lockscan.c and the
 * library's operators' reads (<dlock/admin.h>): every URL form, --config,
 * the --tls-* flags and the environment, as the main command. They take no
 * lock and write nothing.
 */
#ifndef DLOCK_OBS_H
#define DLOCK_OBS_H

#include "lockscan.h"

typedef struct obs_opts {
  const char *cmd; /* "list", "top", "exporter" */
  const char *url, *config;
  const char *tls_ca, *tls_cert, *tls_key;
  int tls_insecure;
  const char *resolved_url; /* after cli_settings */
  const char *pattern;
  const char *listen;
  int json, all, help;
  int scan_count;
  long long count, limit, max_keys, max_locks;
  long long interval_ms, scrape_timeout_ms;
  long long call_ms;  /* --call-timeout: one round trip at most (2000) */
  dlock_admin *admin; /* the reads, on the command's client */
} obs_opts;

/* argv -> *o. 1: the command line is none of these commands; 0: parsed;
 * -1: bad, why in err. */
int obs_parse(int argc, char **argv, obs_opts *o, char *err, size_t el);

/* One scan (deadline_ms: 0 none) into *r. 0 when the masters could be
 * listed (each failed master is in r->errors: obs_report_errors prints
 * them), or the exit code after printing why. ls_free(r) either way. */
int obs_scan(const obs_opts *o, long long deadline_ms, ls_result *r);

/* One line per failed master on stderr ("dlock: master H:P: why"); returns
 * the exit code they mean (0: none failed; 77 if any was refused). */
int obs_report_errors(const ls_result *r);

/* dlock exporter: serves until SIGINT/SIGTERM. The exit code. */
int cli_exporter(const obs_opts *o);

#endif
