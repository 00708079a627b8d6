/*
 * fuzz_config.c -- libFuzzer target: the YAML config loader
 * (dlock_config_load, src/config/config.c). The input is the file's text; it is
 * written to a memfd and loaded through /proc/self/fd, so the real entry
 * point (open, libyaml, the key tables, ${VAR} expansion) runs unchanged.
 * A successful load is disposed (the leak check sees what it allocated).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dlock.h"

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  g_fd = memfd_create("dlock-fuzz-config", 0);
  if (g_fd < 0) {
    perror("memfd_create");
    abort();
  }
  snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
  /* A variable the inputs may expand; another stays unset. */
  setenv("DLOCK_FUZZ_VAR", "redis://127.0.0.1:1", 1);
  unsetenv("DLOCK_FUZZ_UNSET");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size)
    abort();
  dlock_config cfg;
  dlock_config_init(&cfg);
  if (dlock_config_load(g_path, &cfg) == DLOCK_OK) {
    /* What a program does next: validate through the same path as
     * dlock_client_new, without connecting (lazy). */
    cfg.lazy_connect = 1;
    dlock_client *c = NULL;
    if (dlock_client_new(&cfg, &c) == DLOCK_OK)
      dlock_client_free(c);
    dlock_config_dispose(&cfg);
  }
  return 0;
}
