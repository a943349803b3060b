/* An LD_PRELOAD library for tests/test_run_dir.cpp: logs every successful
 * rename(2) (the new path) and every fsync(2) of a directory to the file named
 * by CTRL_IO_TRACE, one "rename PATH" or "fsync-dir PATH" line each (absolute,
 * symlinks resolved), so a test can check that each rename is followed by an
 * fsync of the directory it renamed into. Calls pass through unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void trace(const char* kind, const char* path) {
  const char* log = getenv("CTRL_IO_TRACE");
  if (!log) return;
  const int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[2 * PATH_MAX];
  const int n = snprintf(line, sizeof line, "%s %s\n", kind, path);
  if (n > 0 && write(fd, line, (size_t)n) < 0) { /* a test log: nothing to do */ }
  close(fd);
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*);
  if (!real) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const int r = real(from, to);
  if (r == 0) {
    char resolved[PATH_MAX];
    trace("rename", realpath(to, resolved) ? resolved : to);
  }
  return r;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  const int r = real(fd);
  struct stat st;
  if (r == 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0) {
      path[n] = '\0';
      trace("fsync-dir", path);
    }
  }
  return r;
}
