/*
 * replay.c -- runs a fuzz target's LLVMFuzzerTestOneInput over files
 * without libFuzzer: what `make test` does with tests/fuzz/corpus/<target>/
 * (the seeds and every crash input kept as a regression), so gcc builds
 * and the ASan build replay them too.
 *
 * Usage: fuzz_<target>_replay FILE|DIR...   (a directory: its regular files)
 * Exit 0 when every input ran (a crash aborts the process), 1 when an
 * argument could not be read or held no input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "%s: out of memory\n", path);
    return -1;
  }
  /* A private copy of exactly n bytes, so ASan sees reads past the end. */
  uint8_t *in = malloc(n ? n : 1);
  if (!in) {
    free(buf);
    return -1;
  }
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 1;
}

static int run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    perror(path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return run_file(path);
  struct dirent **ents;
  int n = scandir(path, &ents, NULL, alphasort), count = 0;
  if (n < 0) {
    perror(path);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, ents[i]->d_name);
    if (ents[i]->d_name[0] != '.' && stat(full, &st) == 0 &&
        S_ISREG(st.st_mode)) {
      int r = run_file(full);
      if (r < 0)
        count = -1;
      else if (count >= 0)
        count += r;
    }
    free(ents[i]);
  }
  free(ents);
  return count;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  int total = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    int r = run_path(argv[i]);
    if (r <= 0) {
      fprintf(stderr, "%s: no input run\n", argv[i]);
      bad = 1;
    } else {
      total += r;
    }
  }
  printf("replayed %d inputs\n", total);
  return bad || argc < 2;
}
