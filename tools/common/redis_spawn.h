/*
 * redis_spawn.h -- a private redis-server for the tools (demo, bench,
 * seckill) when the user gives no URL: a fresh temp dir, a unix socket in
 * it (and a free loopback TCP port on request), no persistence. The server
 * dies with the tool (parent-death signal) even if the tool is killed.
 */
#ifndef DLOCK_TOOL_REDIS_SPAWN_H
#define DLOCK_TOOL_REDIS_SPAWN_H

#include <sys/types.h>

typedef struct tool_redis {
  pid_t pid;
  int port;         /* 0 unless started with tcp */
  char dir[128];    /* temp dir, removed by tool_redis_stop */
  char sock[192];   /* unix socket path */
  char url[256];    /* unix:///... */
  char tcp_url[64]; /* redis://127.0.0.1:PORT when tcp */
} tool_redis;

/* Starts the server and waits (at most 10 s) until it answers PING.
 * extra_conf: more redis.conf lines, or NULL. Returns 0, or -1 after
 * printing why on stderr (redis-server missing, did not start). */
int tool_redis_start(tool_redis *r, int tcp, const char *extra_conf);

/* SIGTERM, bounded wait (5 s), SIGKILL; removes the temp dir. Safe to call
 * twice and on a zeroed struct. */
void tool_redis_stop(tool_redis *r);

/* kill -9 and restart on the same socket/port (empty). 0 or -1. */
int tool_redis_restart(tool_redis *r);

#endif
