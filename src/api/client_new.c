/*
 * client_new.c -- dlock_client_new_sized, the public constructor: the one
 * place that knows both stores. client.c builds the client; an etcd:// URL
 * gets the etcd store's ops table (etcd/etcd_ops.c), handed down from here
 * because the client layer sits below etcd (client/store.h; docs/design.md,
 * "The layers of src/").
 */
#include <stddef.h>

#include "etcd/etcd.h"

int dlock_client_new_sized(const dlock_config *cfg, size_t cfg_size,
                           dlock_client **out) {
  return dlock__client_new(cfg, cfg_size, &dlock__etcd_store, out);
}
