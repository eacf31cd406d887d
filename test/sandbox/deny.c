/* test/sandbox/deny.c — runs a program under a seccomp filter that refuses the
 * system calls named, as a container runtime's or a service manager's would.
 *
 *   deny [-e EPERM|ENOSYS|-k] [-a] CALL[,CALL...] -- PROGRAM [ARG...]
 *
 * -e: the calls fail with that errno (Docker's profiles answer EPERM, gVisor and
 * newer profiles ENOSYS); -k: the process is killed with SIGSYS at the first one
 * (systemd's SystemCallFilter= default, Chromium's renderers). Every other call is
 * allowed; with -a the list is the calls allowed and every other one is refused (an
 * allow-list such as systemd's @system-service set; names this libseccomp does not
 * know are skipped). libseccomp resolves the names and builds the filter for this
 * machine's architecture; the filter is loaded with no_new_privs and kept across
 * the exec. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void) {
  fprintf(stderr, "usage: deny [-e EPERM|ENOSYS|-k] [-a] CALL[,CALL...] -- PROGRAM [ARG...]\n");
  return 2;
}

int main(int argc, char **argv) {
  uint32_t action = SCMP_ACT_ERRNO(EPERM);
  int i = 1;
  if (i < argc && !strcmp(argv[i], "-k")) {
    action = SCMP_ACT_KILL_PROCESS;
    i++;
  } else if (i + 1 < argc && !strcmp(argv[i], "-e")) {
    if (!strcmp(argv[i + 1], "EPERM"))
      action = SCMP_ACT_ERRNO(EPERM);
    else if (!strcmp(argv[i + 1], "ENOSYS"))
      action = SCMP_ACT_ERRNO(ENOSYS);
    else
      return usage();
    i += 2;
  }
  int allow_list = 0;
  if (i < argc && !strcmp(argv[i], "-a")) {
    allow_list = 1;
    i++;
  }
  if (i + 2 >= argc || strcmp(argv[i + 1], "--")) return usage();
  scmp_filter_ctx ctx = seccomp_init(allow_list ? action : SCMP_ACT_ALLOW);
  if (!ctx) {
    fprintf(stderr, "deny: seccomp_init failed\n");
    return 2;
  }
  char *names = argv[i];
  for (char *name = strtok(names, ","); name; name = strtok(NULL, ",")) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) {
      if (allow_list) continue;
      fprintf(stderr, "deny: no system call '%s' here\n", name);
      return 2;
    }
    int rc = seccomp_rule_add(ctx, allow_list ? SCMP_ACT_ALLOW : action, nr, 0);
    if (rc < 0) {
      fprintf(stderr, "deny: cannot filter '%s': %s\n", name, strerror(-rc));
      return 2;
    }
  }
  int rc = seccomp_load(ctx);
  if (rc < 0) {
    fprintf(stderr, "deny: seccomp_load: %s\n", strerror(-rc));
    return 2;
  }
  seccomp_release(ctx);
  execvp(argv[i + 2], argv + i + 2);
  fprintf(stderr, "deny: %s: %s\n", argv[i + 2], strerror(errno));
  return 127;
}
