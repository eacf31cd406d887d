/* uslab.h — public C API of the uslab allocator.
 *
 * Link with -luslab (pkg-config uslab) or preload libuslab.so; the malloc family and
 * C++ operators are interposed either way. This header adds uslab's own functions.
 * Configuration is the USLAB_CONF environment variable ("key=value,..."; see the
 * README), or a string the program links in:
 *     const char *uslab_malloc_conf = "decay_ms=1000";
 */
#ifndef USLAB_H
#define USLAB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define USLAB_VERSION "0.1.0"

/* The version string of the loaded library. */
const char *uslab_version(void);

/* Writes the slabinfo-style statistics table through write_cb, one line per call.
 * Allocates nothing, so it may be called from a signal-free context at any time. */
void uslab_stats_print(void (*write_cb)(void *opaque, const char *text), void *opaque);

/* Returns cached free memory to the OS now (as malloc_trim(0)); bytes released. */
size_t uslab_trim(void);

#ifdef __cplusplus
}
#endif

#endif /* USLAB_H */
