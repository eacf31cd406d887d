/* test/common/section_holder.h — a thread that keeps a uslab read-side section open
 * until released, so that nothing deferred meanwhile can be freed (for the C tests
 * linked with libuslab). */
#ifndef USLAB_TEST_SECTION_HOLDER_H
#define USLAB_TEST_SECTION_HOLDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "include/uslab.h"

struct section_holder {
  pthread_t thread;
  atomic_int inside, release;
};

static inline void *section_holder_main(void *arg) {
  struct section_holder *h = arg;
  uslab_read_lock();
  atomic_store(&h->inside, 1);
  while (!atomic_load(&h->release)) usleep(1000);
  uslab_read_unlock();
  return NULL;
}

/* Returns once the holder is inside its section. */
static inline void section_hold(struct section_holder *h) {
  atomic_store(&h->inside, 0);
  atomic_store(&h->release, 0);
  pthread_create(&h->thread, NULL, section_holder_main, h);
  while (!atomic_load(&h->inside)) usleep(100);
}

/* Ends the section and joins the holder. */
static inline void section_release(struct section_holder *h) {
  atomic_store(&h->release, 1);
  pthread_join(h->thread, NULL);
}

#endif
