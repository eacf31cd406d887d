/* tools/topology.c — `uslab topology`: prints what the topology providers see and
 * what uslab uses (uslab_topology_print). Linked against libuslab.so, so the
 * allocator it describes is the one running it (USLAB_CONF applies). */
#include <stdio.h>

#include "include/uslab.h"

static void write_stdout(void *opaque, const char *text) {
  (void)opaque;
  fputs(text, stdout);
}

int main(void) {
  uslab_topology_print(write_stdout, NULL);
  return ferror(stdout) ? 1 : 0;
}
