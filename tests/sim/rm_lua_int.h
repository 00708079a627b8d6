/*
 * rm_lua_int.h -- what the Redis model's two Lua files share: the Lua
 * state's owner (rm_lua), the sink that puts a command's reply on the Lua
 * stack, and the conversion of a script's result. rm_lua.c owns the state
 * and the conversions, rm_script.c the script cache and EVAL / EVALSHA /
 * SCRIPT.
 */
#ifndef DLOCK_RM_LUA_INT_H
#define DLOCK_RM_LUA_INT_H

#include <lua.h>
#include <stdio.h>

#include "rm_int.h"

struct rm_lua {
  lua_State *L;
  rm_model *m;
  int handler_ref; /* the error handler, in the registry */
  /* redis.call's arguments (no call nests in another: one scratch) */
  rm_arg *av;
  char (*num)[64]; /* the text of number arguments */
  size_t av_cap;
  /* line coverage (rm_line_coverage_on): the lines each script ran */
  int cov;
  const char *cur_sha; /* the script running now */
  struct rm_cov *covs;
  size_t ncovs;
};

#define RM_COV_LINES 1024
typedef struct rm_cov {
  char sha[41];
  unsigned char hit[RM_COV_LINES];
} rm_cov;

/* Installs the line hook on a new state when coverage is on. */
void rm_lua_cov_hook(rm_lua *l);

/* The Lua sink's state: arrays being filled, and whether the top-level
 * value is an error (redis.call raises it). */
typedef struct rm_lsink {
  lua_State *L;
  int depth;
  size_t left[16], idx[16];
  int top_error;
} rm_lsink;
extern const rm_sink rm_lua_sink;

/* A new state with Redis's libraries, redis.* and read-only globals;
 * sets l->handler_ref. */
lua_State *rm_lua_state_new(rm_lua *l);
/* The value on top of the stack as a reply through c's sink. */
void rm_lua_to_reply(lua_State *L, rm_ctx *c);
/* A Lua number as Redis's integer reply. */
long long rm_lua_to_ll(double d);

#endif
