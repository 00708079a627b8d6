/*
 * etcd_ops.c -- the etcd store's ops table (client/store.h): the entries
 * through which the client (start, stop, release, the info key) and the
 * kinds (mutex, permits, semaphore) reach an etcd:// client's store. The
 * public constructor (api/client_new.c) hands it to the client.
 */
#include "etcd/etcd_int.h"

const dlock__store_ops dlock__etcd_store = {
    .client_start = dlock__etcd_client_start,
    .client_stop = dlock__etcd_client_stop,
    .client_release = dlock__etcd_client_release,
    .client_info = dlock__etcd_client_info,

    .kind_check = dlock__etcd_kind_check,
    .mutex_attach = dlock__etcd_mutex_attach,
    .mutex_detach = dlock__etcd_mutex_detach,
    .acquire = dlock__etcd_acquire,
    .release = dlock__etcd_release,
    .force_unlock = dlock__etcd_force_unlock,
    .is_locked = dlock__etcd_is_locked,
    .is_held = dlock__etcd_is_held,
    .hold_count = dlock__etcd_hold_count,
    .ttl = dlock__etcd_ttl,

    .permits_new = dlock__etcd_permits_new,
    .permits_free = dlock__etcd_permits_free,
    .permits_acquire = dlock__etcd_permits_acquire,
    .permits_release = dlock__etcd_permits_release,
    .permits_update_lease = dlock__etcd_permits_update_lease,
    .permits_available = dlock__etcd_permits_available,
    .permits_set = dlock__etcd_permits_set,
    .permits_list = dlock__etcd_permits_list,

    .sem_new = dlock__etcd_sem_new,
    .sem_free = dlock__etcd_sem_free,
    .sem_init = dlock__etcd_sem_init,
    .sem_wait = dlock__etcd_sem_wait,
    .sem_post = dlock__etcd_sem_post,
    .sem_value = dlock__etcd_sem_value,
};
