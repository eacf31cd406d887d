// core/foreign/glibc_chunk.cc — glibc's chunk layout (glibc_chunk.h). Locking: none.
#include "core/foreign/glibc_chunk.h"

#include <sys/syscall.h>

#include <cstdint>

#include "core/platform/platform.h"

namespace uslab::foreign {

namespace {

uintptr_t g_initial_break = 0;

// glibc's chunk layout (malloc/malloc.c): prev_size, size | flags, then the block.
constexpr uintptr_t kMmapped = 2, kNonMainArena = 4;
constexpr uintptr_t kHeapMax = uintptr_t{64} << 20;  // HEAP_MAX_SIZE on 64-bit

}  // namespace

USLAB_STARTUP_TEXT void glibc_chunks_init(const void* initial_break) {
  g_initial_break = reinterpret_cast<uintptr_t>(initial_break);
}

bool is_glibc_block(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a % 16 != 0 || a < 4096) return false;
  uintptr_t hdr[2];  // prev_size, size
  if (!os::read_memory(a - 16, hdr, sizeof hdr)) return false;
  uintptr_t size = hdr[1] & ~uintptr_t{7};
  if (size < 32 || size % 16 != 0) return false;
  const uintptr_t page = os::kernel_page_size();  // glibc's mmapped chunks'
  if (hdr[1] & kMmapped) {
    uintptr_t start = a - 16 - hdr[0];
    return start % page == 0 && (size + hdr[0]) % page == 0;
  }
  if (hdr[1] & kNonMainArena) {
    // heap_info at the start of the arena's 64 MiB-aligned heap: ar_ptr, prev, size.
    uintptr_t info[3];
    uintptr_t heap = a & ~(kHeapMax - 1);
    return os::read_memory(heap, info, sizeof info) && info[0] != 0 && a - heap < info[2] &&
           a - 16 + size <= heap + info[2];
  }
  uintptr_t brk = static_cast<uintptr_t>(os::syscall6(SYS_brk, 0));
  return g_initial_break && a - 16 >= g_initial_break && a - 16 + size <= brk;
}

}  // namespace uslab::foreign
