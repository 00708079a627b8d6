/*
 * redis_spawn.h -- a private redis-server process, for the tools (demo,
 * bench, seckill: when the user gives no URL) and for the test harness:
 * a private directory, a generated config (a unix socket in that
 * directory, a free loopback TCP port on request, no persistence), a
 * bounded readiness wait (PING), SIGTERM then SIGKILL. The server dies
 * with the process that started it (parent-death signal).
 */
#ifndef DLOCK_COMMON_REDIS_SPAWN_H
#define DLOCK_COMMON_REDIS_SPAWN_H

#include <sys/types.h>

typedef struct dlc_redis {
  pid_t pid;
  int port;          /* 0: unix socket only */
  char dir[160];     /* private directory */
  char sock[224];    /* unix socket path */
  char url[256];     /* unix:///... */
  char tcp_url[128]; /* redis://127.0.0.1:port when port > 0 */
  char extra[1024];  /* more redis.conf lines */
  int sentinel;      /* run as a Sentinel (redis-server --sentinel): set
                        between dlc_redis_prepare and dlc_redis_start */
} dlc_redis;

/* A loopback TCP port nobody holds right now, outside the kernel's
 * ephemeral range (so no client connection can take it while its server
 * restarts), with port + 10000 (a Cluster bus) outside it too; 0 if none
 * was found. Thread-safe. */
int dlc_free_port(void);

/* dlc_redis_spawn's failures. */
#define DLC_REDIS_FAILED (-1)   /* exited, or no PING answer in 10 s */
#define DLC_REDIS_NOTFOUND (-2) /* redis-server is not installed */

/* Zeroes r and creates its directory: parent/<prefix>XXXXXX. extra_conf:
 * more redis.conf lines ("requirepass x\n"), or NULL. 0, or -1 (errno). */
int dlc_redis_prepare(dlc_redis *r, const char *parent, const char *prefix,
                      const char *extra_conf);

/* Starts the server of a prepared r (a TCP port too when tcp, trying up to
 * five free ports) and fills r->url / r->tcp_url. quiet: the server's
 * stderr goes to /dev/null (it logs to dir/redis.log either way).
 * 0, DLC_REDIS_FAILED or DLC_REDIS_NOTFOUND. */
int dlc_redis_start(dlc_redis *r, int tcp, int quiet);

/* Starts it again on the same socket and port, empty (attempts tries, 100
 * ms apart: the TCP port may linger). The old server must be gone. */
int dlc_redis_respawn(dlc_redis *r, int attempts, int quiet);

/* SIGCONT + SIGTERM, bounded wait (5 s), SIGKILL. Keeps the directory
 * (for the log). Safe on a stopped or zeroed r. */
void dlc_redis_stop(dlc_redis *r);
/* kill -9 now, and reap it. */
void dlc_redis_kill(dlc_redis *r);
/* Removes the directory and what the server left in it. */
void dlc_redis_remove_dir(dlc_redis *r);

/* The tools' private server: a directory under $TMPDIR (else /tmp), a
 * quiet server. Returns 0, or -1 after printing why on stderr. */
int dlc_redis_start_private(dlc_redis *r, int tcp, const char *extra_conf);
/* dlc_redis_stop, then dlc_redis_remove_dir. */
void dlc_redis_stop_private(dlc_redis *r);

#endif
