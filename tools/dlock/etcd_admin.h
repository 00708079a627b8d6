/*
 * etcd_admin.h -- the CLI's operator commands on an etcd:// URL
 * (etcd_admin.c): `dlock list` through the library's calls.
 */
#ifndef DLOCK_CLI_ETCD_ADMIN_H
#define DLOCK_CLI_ETCD_ADMIN_H

#include "cli.h"

/* 1 if url is etcd:// or etcds://. */
int cli_etcd_url(const char *url);

/* `dlock <cmd>` (list, top, exporter) on the etcd URL of co (cli_settings
 * done): list prints every lock name under the URL's prefix matching
 * pattern (NULL: all) with its holder, TTL and waiters (json: one JSON
 * document); top and exporter say they are Redis's (64). The exit code. */
int cli_etcd_obs(const char *cmd, const char *pattern, int json, cli_opts *co);

struct ls_lock;
/* The lock name on etcd client c as `dlock status` shows it (lockscan's
 * shape: kind "mutex", its waiters in queue order, "fair"): 0, or a
 * DLOCK_E* code (dlock_last_error says why). lk: zeroed by the call,
 * freed with ls_lock_free. */
int cli_etcd_read_lock(dlock_client *c, const char *name, struct ls_lock *lk);

#endif
