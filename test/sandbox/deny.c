/* test/sandbox/deny.c — runs a program under a seccomp filter that refuses the
 * system calls named, as a container runtime's or a service manager's would.
 *
 *   deny [-x ERRNO CALL[,CALL...]]... [-e EPERM|ENOSYS|-k] [-a] CALL[,CALL...] -- PROGRAM [ARG...]
 *
 * -e: the calls fail with that errno (Docker's profiles answer EPERM, gVisor and
 * newer profiles ENOSYS); -k: the process is killed with SIGSYS at the first one
 * (systemd's SystemCallFilter= default, Chromium's renderers). Every other call is
 * allowed; with -a the list is the calls allowed and every other one is refused (an
 * allow-list such as systemd's @system-service set; names this libseccomp does not
 * know are skipped). -x: those calls fail with that errno (a number, or EPERM or
 * ENOSYS) whatever else the filter says, as a container profile's own errno rules
 * do (test/sandbox/profile.py writes such arguments from a profile). libseccomp resolves the names and builds the filter for this
 * machine's architecture; the filter is loaded with no_new_privs and kept across
 * the exec. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int usage(void) {
  fprintf(stderr,
          "usage: deny [-x ERRNO CALL[,CALL...]]... [-e EPERM|ENOSYS|-k] [-a] CALL[,CALL...] "
          "-- PROGRAM [ARG...]\n");
  return 2;
}

/* An errno by name (the two sandboxes answer) or number; 0 when neither. */
static int errno_of(const char *s) {
  if (!strcmp(s, "EPERM")) return EPERM;
  if (!strcmp(s, "ENOSYS")) return ENOSYS;
  int e = atoi(s);
  return e > 0 && e < 4096 ? e : 0;
}

/* Adds a rule of `action` for each call of the comma-separated list (a copy is cut);
 * a name this machine does not know is skipped when `skip_unknown`. */
static int add_rules(scmp_filter_ctx ctx, uint32_t action, char *names, int skip_unknown) {
  for (char *name = strtok(names, ","); name; name = strtok(NULL, ",")) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) {
      if (skip_unknown) continue;
      fprintf(stderr, "deny: no system call '%s' here\n", name);
      return -1;
    }
    int rc = seccomp_rule_add(ctx, action, nr, 0);
    if (rc < 0) {
      fprintf(stderr, "deny: cannot filter '%s': %s\n", name, strerror(-rc));
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  uint32_t action = SCMP_ACT_ERRNO(EPERM);
  int i = 1;
  int first_x = i;
  while (i + 2 < argc && !strcmp(argv[i], "-x")) {
    if (!errno_of(argv[i + 1])) return usage();
    i += 3;
  }
  int end_x = i;
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
  for (int x = first_x; x < end_x; x += 3)
    if (add_rules(ctx, SCMP_ACT_ERRNO(errno_of(argv[x + 1])), argv[x + 2], 1) < 0) return 2;
  if (add_rules(ctx, allow_list ? SCMP_ACT_ALLOW : action, argv[i], allow_list) < 0) return 2;
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
