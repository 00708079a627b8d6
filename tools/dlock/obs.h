/*
 * obs.h -- the operator's commands of the dlock CLI: `dlock list`, `dlock
 * top` (list.c) and `dlock exporter` (exporter.c), over lockscan.c. They
 * read a whole Redis's lock space with plain connections; they take no
 * lock and write nothing.
 */
#ifndef DLOCK_OBS_H
#define DLOCK_OBS_H

#include "lockscan.h"

typedef struct obs_opts {
  const char *cmd; /* "list", "top", "exporter" */
  const char *url, *config;
  const char *resolved_url; /* after cli_settings */
  const char *pattern;
  const char *listen;
  int json, all, help;
  int scan_count;
  long long count, limit, max_keys, max_locks;
  long long interval_ms, scrape_timeout_ms;
} obs_opts;

/* argv -> *o. 1: the command line is none of these commands; 0: parsed;
 * -1: bad, why in err. */
int obs_parse(int argc, char **argv, obs_opts *o, char *err, size_t el);

/* One scan of o->resolved_url (deadline_ms: 0 none). 0, or the exit code
 * after printing why (69 unreachable, 77 auth, 70 other). */
int obs_scan(const obs_opts *o, long long deadline_ms, ls_result *r);

/* dlock exporter: serves until SIGINT/SIGTERM. The exit code. */
int cli_exporter(const obs_opts *o);

#endif
