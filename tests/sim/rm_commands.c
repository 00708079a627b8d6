/*
 * rm_commands.c -- the Redis model's command table (rm_int.h): the
 * families' tables joined into one lookup by lower-cased name, container
 * commands' subcommands (PUBSUB, SCRIPT), arity as Redis states it, and
 * running a command. A Redis command the table does not have is not
 * modelled: the callers turn that into a model error, never into
 * "ignored". A name that is no Redis command at all gets Redis's own
 * answer (in a script: "Unknown Redis command called from script"): the
 * model knows the names of Redis 7.0.15's commands (COMMAND LIST), not
 * what they do.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

#define NSLOTS 256 /* power of two, > 2x the commands */

static const rm_cmd *g_slots[NSLOTS];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 16777619u;
  }
  return h;
}

static void add_table(const rm_cmd *t) {
  for (; t->name; t++) {
    uint32_t h = name_hash(t->name, strlen(t->name)) & (NSLOTS - 1);
    while (g_slots[h])
      h = (h + 1) & (NSLOTS - 1);
    g_slots[h] = t;
  }
}

static void build(void) {
  add_table(rm_cmds_generic);
  add_table(rm_cmds_string);
  add_table(rm_cmds_hash);
  add_table(rm_cmds_list);
  add_table(rm_cmds_zset);
  add_table(rm_cmds_script);
}

/* The lower-cased name into buf (>= 32 bytes); 0 when too long. */
static size_t lower(rm_arg a, char *buf) {
  if (a.len == 0 || a.len >= 32)
    return 0;
  for (size_t i = 0; i < a.len; i++) {
    char ch = a.p[i];
    buf[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  buf[a.len] = '\0';
  return a.len;
}

static const rm_cmd *find_top(rm_arg name) {
  pthread_once(&g_once, build);
  char buf[32];
  size_t n = lower(name, buf);
  if (!n)
    return NULL;
  uint32_t h = name_hash(buf, n) & (NSLOTS - 1);
  while (g_slots[h]) {
    if (strcmp(g_slots[h]->name, buf) == 0)
      return g_slots[h];
    h = (h + 1) & (NSLOTS - 1);
  }
  return NULL;
}

/* Redis 7.0.15's commands (COMMAND LIST, without subcommands). */
static const char *const g_redis_names[] = {"acl",
                                            "append",
                                            "asking",
                                            "auth",
                                            "bgrewriteaof",
                                            "bgsave",
                                            "bitcount",
                                            "bitfield",
                                            "bitfield_ro",
                                            "bitop",
                                            "bitpos",
                                            "blmove",
                                            "blmpop",
                                            "blpop",
                                            "brpop",
                                            "brpoplpush",
                                            "bzmpop",
                                            "bzpopmax",
                                            "bzpopmin",
                                            "client",
                                            "cluster",
                                            "command",
                                            "config",
                                            "copy",
                                            "dbsize",
                                            "debug",
                                            "decr",
                                            "decrby",
                                            "del",
                                            "discard",
                                            "dump",
                                            "echo",
                                            "eval",
                                            "eval_ro",
                                            "evalsha",
                                            "evalsha_ro",
                                            "exec",
                                            "exists",
                                            "expire",
                                            "expireat",
                                            "expiretime",
                                            "failover",
                                            "fcall",
                                            "fcall_ro",
                                            "flushall",
                                            "flushdb",
                                            "function",
                                            "geoadd",
                                            "geodist",
                                            "geohash",
                                            "geopos",
                                            "georadius",
                                            "georadius_ro",
                                            "georadiusbymember",
                                            "georadiusbymember_ro",
                                            "geosearch",
                                            "geosearchstore",
                                            "get",
                                            "getbit",
                                            "getdel",
                                            "getex",
                                            "getrange",
                                            "getset",
                                            "hdel",
                                            "hello",
                                            "hexists",
                                            "hget",
                                            "hgetall",
                                            "hincrby",
                                            "hincrbyfloat",
                                            "hkeys",
                                            "hlen",
                                            "hmget",
                                            "hmset",
                                            "hrandfield",
                                            "hscan",
                                            "hset",
                                            "hsetnx",
                                            "hstrlen",
                                            "hvals",
                                            "incr",
                                            "incrby",
                                            "incrbyfloat",
                                            "info",
                                            "keys",
                                            "lastsave",
                                            "latency",
                                            "lcs",
                                            "lindex",
                                            "linsert",
                                            "llen",
                                            "lmove",
                                            "lmpop",
                                            "lolwut",
                                            "lpop",
                                            "lpos",
                                            "lpush",
                                            "lpushx",
                                            "lrange",
                                            "lrem",
                                            "lset",
                                            "ltrim",
                                            "memory",
                                            "mget",
                                            "migrate",
                                            "module",
                                            "monitor",
                                            "move",
                                            "mset",
                                            "msetnx",
                                            "multi",
                                            "object",
                                            "persist",
                                            "pexpire",
                                            "pexpireat",
                                            "pexpiretime",
                                            "pfadd",
                                            "pfcount",
                                            "pfdebug",
                                            "pfmerge",
                                            "pfselftest",
                                            "ping",
                                            "psetex",
                                            "psubscribe",
                                            "psync",
                                            "pttl",
                                            "publish",
                                            "pubsub",
                                            "punsubscribe",
                                            "quit",
                                            "randomkey",
                                            "readonly",
                                            "readwrite",
                                            "rename",
                                            "renamenx",
                                            "replconf",
                                            "replicaof",
                                            "reset",
                                            "restore",
                                            "restore-asking",
                                            "role",
                                            "rpop",
                                            "rpoplpush",
                                            "rpush",
                                            "rpushx",
                                            "sadd",
                                            "save",
                                            "scan",
                                            "scard",
                                            "script",
                                            "sdiff",
                                            "sdiffstore",
                                            "select",
                                            "set",
                                            "setbit",
                                            "setex",
                                            "setnx",
                                            "setrange",
                                            "shutdown",
                                            "sinter",
                                            "sintercard",
                                            "sinterstore",
                                            "sismember",
                                            "slaveof",
                                            "slowlog",
                                            "smembers",
                                            "smismember",
                                            "smove",
                                            "sort",
                                            "sort_ro",
                                            "spop",
                                            "spublish",
                                            "srandmember",
                                            "srem",
                                            "sscan",
                                            "ssubscribe",
                                            "strlen",
                                            "subscribe",
                                            "substr",
                                            "sunion",
                                            "sunionstore",
                                            "sunsubscribe",
                                            "swapdb",
                                            "sync",
                                            "time",
                                            "touch",
                                            "ttl",
                                            "type",
                                            "unlink",
                                            "unsubscribe",
                                            "unwatch",
                                            "wait",
                                            "watch",
                                            "xack",
                                            "xadd",
                                            "xautoclaim",
                                            "xclaim",
                                            "xdel",
                                            "xgroup",
                                            "xinfo",
                                            "xlen",
                                            "xpending",
                                            "xrange",
                                            "xread",
                                            "xreadgroup",
                                            "xrevrange",
                                            "xsetid",
                                            "xtrim",
                                            "zadd",
                                            "zcard",
                                            "zcount",
                                            "zdiff",
                                            "zdiffstore",
                                            "zincrby",
                                            "zinter",
                                            "zintercard",
                                            "zinterstore",
                                            "zlexcount",
                                            "zmpop",
                                            "zmscore",
                                            "zpopmax",
                                            "zpopmin",
                                            "zrandmember",
                                            "zrange",
                                            "zrangebylex",
                                            "zrangebyscore",
                                            "zrangestore",
                                            "zrank",
                                            "zrem",
                                            "zremrangebylex",
                                            "zremrangebyrank",
                                            "zremrangebyscore",
                                            "zrevrange",
                                            "zrevrangebylex",
                                            "zrevrangebyscore",
                                            "zrevrank",
                                            "zscan",
                                            "zscore",
                                            "zunion",
                                            "zunionstore",
                                            NULL};

static int redis_knows(rm_arg name) {
  char buf[32];
  if (!lower(name, buf))
    return 0;
  size_t lo = 0, hi = sizeof g_redis_names / sizeof g_redis_names[0] - 1;
  while (lo < hi) { /* sorted */
    size_t mid = (lo + hi) / 2;
    int c = strcmp(g_redis_names[mid], buf);
    if (c == 0)
      return 1;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

int rm_cmd_lookup(int argc, const rm_arg *argv, const rm_cmd **cmd) {
  const rm_cmd *top = find_top(argv[0]);
  *cmd = top;
  if (!top)
    return redis_knows(argv[0]) ? RM_LK_UNMODELLED : RM_LK_UNKNOWN;
  if (!(top->flags & RM_CMD_CONTAINER) || argc < 2)
    return RM_LK_FOUND; /* a container alone: its arity error */
  size_t tl = strlen(top->name);
  for (const rm_cmd *s = top->sub; s->name; s++)
    if (rm_arg_is(argv[1], s->name + tl + 1)) {
      *cmd = s;
      return RM_LK_FOUND;
    }
  return RM_LK_UNKNOWN_SUB;
}

int rm_cmd_arity_ok(const rm_cmd *cmd, int argc) {
  return cmd->arity > 0 ? argc == cmd->arity : argc >= -cmd->arity;
}

void rm_cmd_run(rm_ctx *c, const rm_cmd *cmd) { cmd->fn(c); }

int rm_has_command(const char *name, size_t len) {
  const rm_cmd *c = find_top((rm_arg){name, len});
  return c && (c->fn || (c->flags & RM_CMD_CONTAINER));
}
