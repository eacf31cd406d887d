// compat/glibc.cc — glibc's malloc extras, for programs that call them under uslab:
// malloc_trim, mallinfo, mallinfo2, malloc_stats, malloc_info, mallopt (not in the
// musl build: musl has none of them).
//
// mallopt accepts every option and changes nothing (uslab's tunables are USLAB_CONF);
// mallinfo's fields are filled from uslab's own counters as their glibc meaning is
// closest. Locking: none here; see core/heap/heap.h.
#include <cstdio>
#include <malloc.h>

#include "core/core.h"
#include "preload/export.h"

using namespace uslab;

namespace {

struct mallinfo2 fill() {
  heap::Stats st = heap::stats();
  struct mallinfo2 mi = {};
  mi.arena = st.mapped - st.huge_allocated;
  mi.hblks = st.huge_count;
  mi.hblkhd = st.huge_allocated;
  mi.uordblks = st.allocated;
  mi.fordblks = st.free_bytes;
  mi.keepcost = st.dirty_bytes;
  return mi;
}

int clamp_int(size_t v) { return v > 0x7fffffff ? 0x7fffffff : static_cast<int>(v); }

}  // namespace

extern "C" {

USLAB_EXPORT int malloc_trim(size_t) { return heap::trim() ? 1 : 0; }

USLAB_EXPORT struct mallinfo2 mallinfo2(void) { return fill(); }

USLAB_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m = fill();
  struct mallinfo r = {};
  r.arena = clamp_int(m.arena);
  r.hblks = clamp_int(m.hblks);
  r.hblkhd = clamp_int(m.hblkhd);
  r.uordblks = clamp_int(m.uordblks);
  r.fordblks = clamp_int(m.fordblks);
  r.keepcost = clamp_int(m.keepcost);
  return r;
}

USLAB_EXPORT void malloc_stats(void) { heap::stats_print_stderr(); }

USLAB_EXPORT int malloc_info(int options, FILE* fp) {
  if (options != 0 || !fp) return -1;
  heap::Stats st = heap::stats();
  fprintf(fp,
          "<malloc version=\"uslab-1\">\n"
          "<total type=\"mapped\" size=\"%zu\"/>\n"
          "<total type=\"allocated\" size=\"%zu\"/>\n"
          "<total type=\"free\" size=\"%zu\"/>\n"
          "<total type=\"dirty\" size=\"%zu\"/>\n"
          "<total type=\"returned\" size=\"%zu\"/>\n"
          "</malloc>\n",
          st.mapped, st.allocated, st.free_bytes, st.dirty_bytes, st.purged_bytes);
  return 0;
}

USLAB_EXPORT int mallopt(int, int) { return 1; }

}  // extern "C"
