/*
 * config.h -- the settings layer (src/config/): a dlock_config's defaults,
 * its layout record, its checks and what is derived from it (settings.c),
 * config files (config.c), and key store paths and formats (keystore.c).
 * Above proto; no connection, no client.
 */
#ifndef DLOCK_CONFIG_H
#define DLOCK_CONFIG_H

#include "proto/proto.h"

/* ---- settings (settings.c) ---------------------------------------------- */

/* 0 if cfg carries the layout record dlock_config_init_sized writes (size:
 * the bytes the caller's header gives the struct, at least the record), else
 * DLOCK_EINVAL with why in the thread's message. */
int dlock__config_check_record(const dlock_config *cfg, size_t size);
/* *out = the caller's config (sized by its own layout record) checked and
 * completed as dlock_client_new does it: 0, or DLOCK_EINVAL / DLOCK_ENOTSUP
 * with the message set. NULL in: all defaults. Strings stay borrowed. */
int dlock__config_resolve(const dlock_config *in, dlock_config *out);
/* How long an unlock latch must live: past every retry of its unlock. */
int64_t dlock__latch_ttl(const dlock_config *cfg);
/* The longest one send of a command can take (connect, handshake, the
 * reply, and the WAIT behind it when cfg.sync_replicas is set). */
int64_t dlock__send_max(const dlock_config *cfg);
/* A counting script's once key (counter.c): its copies are sent within
 * *window ms of the first send (the whole retry policy: every attempt's
 * send_max and pause, and the immediate reconnect-and-resend), and the
 * key lives that window + send_max + a margin (the return value), so a
 * copy that reaches the server within send_max of being sent finds it. */
int64_t dlock__once_ttl(const dlock_config *cfg, int64_t *window);
/* The lowest value dlock_client_new accepts for the int field of
 * dlock_config at byte offset off; INT_MIN for a field without a bound. */
int dlock__config_int_min(size_t off);
/* The pause before retry n (0: the first retry) under cfg's retry delay
 * policy (retry_delay, dlock.h). *prev carries the previous pause between
 * the calls of one retry loop (decorrelated jitter needs it; start it at
 * 0); NULL: none. Any thread. */
int64_t dlock__retry_pause(const dlock_config *cfg, int n, int64_t *prev);
/* The longest pause dlock__retry_pause can return for cfg. */
int64_t dlock__retry_pause_max(const dlock_config *cfg);

/* *out = the caller's config as a whole one of this library's layout: the
 * fields that fit in the caller's size, defaults for the rest. Reads no byte
 * of *in past min(size, in->abi_size). NULL: all defaults. 0, or
 * DLOCK_EINVAL / DLOCK_ENOTSUP with the message set. */
int dlock__config_load(const dlock_config *in, size_t size, dlock_config *out);
/* The checks dlock_client_new makes of a loaded config (retry_delay, the
 * int fields' lower bounds): 0 or DLOCK_EINVAL with the message set. */
int dlock__config_check(const dlock_config *cfg);

/* ---- config files (config.c) -------------------------------------------- */

/* Passes the Redisson settings the file(s) loaded into cfg accepted but
 * ignore to log's hook, one "config_ignored" event (INFO) each. A config
 * that was not loaded from a file: nothing. Called by dlock_client_new and
 * dlock_async_new. */
void dlock__config_log_ignored(const dlock_config *cfg,
                               const dlock_config *log);
/* The name of the setting at byte offset off of cfg for messages: the YAML
 * key it came from when a config file set it, else c_name. */
const char *dlock__config_key(const dlock_config *cfg, size_t off,
                              const char *c_name);

const char *dlock__store_path(const char *path);
/* 1 with *kind "JKS" / "JCEKS" when the n bytes at b start a Java keystore
 * (which OpenSSL cannot read), else 0. */
int dlock__store_java_kind(const unsigned char *b, size_t n, const char **kind);
/* "KEY 'PATH' is a Java keystore (KIND) ...: convert it ... keytool ..."
 * into buf. */
int dlock__store_java_hint(char *buf, size_t len, const char *key,
                           const char *path, const char *kind);

#endif
