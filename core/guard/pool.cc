// core/guard/pool.cc — the guarded slots: the pool mapped at the first sample, the
// sampling hook that serves an object from a slot, free into the quarantine, and the
// reports made at free. See guard.h for the layout and the locking.
#include "core/guard/guard.h"

#include <cstring>

#include "core/alloc/alloc.h"

namespace uslab::guard {

namespace internal {
constinit Pool g_pool;
USLAB_LOCK_ONE(kGuardPool, g_pool.lock);
}  // namespace internal

using namespace internal;

namespace {

// Inside the hook or a free here (an unwinder that allocates): served unguarded.
__thread bool t_busy __attribute__((tls_model("initial-exec")));

// Which end of its pages an object takes: a thread's xorshift, seeded from getrandom
// once (a getrandom call per guarded allocation showed in its time).
__thread uint64_t t_side __attribute__((tls_model("initial-exec")));
bool at_start_of_pages() {
  uint64_t x = t_side ? t_side : os::random_u64();
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  t_side = x;
  return x >> 63;
}

// Maps the pool's address space inaccessible, its records and one span a slot, each
// slot's pages in the page map. Lock held; false (for good) when it cannot.
bool create_pool() USLAB_REQUIRES(g_pool.lock) {
  if (g_pool.base) return true;
  if (g_pool.failed) return false;
  g_pool.failed = true;
  const uint32_t n = static_cast<uint32_t>(g_config.guard_slots);
  // A guard before the first slot too: an object at its slot's start (with 64 KiB
  // pages, one that fills its area) has one before it as the others do.
  const size_t lead = page_granule();
  const size_t bytes = lead + size_t{n} * slot_bytes();
  char* map = static_cast<char*>(os::map_aligned(bytes, lead));
  if (!map) return false;
  char* base = map + lead;
  const size_t meta = size_t{n} * (sizeof(Slot) + sizeof(Span)) + alignof(Span);
  char* m = static_cast<char*>(os::map_metadata(meta));
  // Guard regions where the kernel has them, over a mapping left read/write (in
  // small pages: under THP "always" a huge page would make 2 MiB of slots resident).
  os::advise_huge(map, bytes, false);
  g_pool.regions = os::guard_region(map, bytes, true);
  if (!m || (!g_pool.regions && !os::protect(map, bytes, false)) ||
      !PageMap::reserve(base, bytes - lead)) {
    os::unmap(map, bytes);
    if (m) os::unmap(m, meta);
    return false;
  }
  Span* spans = reinterpret_cast<Span*>((reinterpret_cast<uintptr_t>(m) + alignof(Span) - 1) &
                                        ~(alignof(Span) - 1));
  Slot* slots = reinterpret_cast<Slot*>(spans + n);
  for (uint32_t i = 0; i < n; i++) {
    Span* s = &spans[i];
    s->kind = SpanKind::kGuarded;
    s->first_page = i;
    s->npages = static_cast<uint32_t>(slot_bytes() >> kPageShift);
    char* at = base + size_t{i} * slot_bytes();
    s->start = at;
    for (size_t off = 0; off < slot_bytes(); off += kPageSize) PageMap::set(at + off, s);
  }
  g_pool.slots = slots;
  g_pool.spans = spans;
  g_pool.count = n;
  __atomic_store_n(&g_pool.base, base, __ATOMIC_RELEASE);
  g_pool.failed = false;
  return true;
}

// A slot for a new object: a never-used one first, else the least recently freed.
uint32_t take_slot() USLAB_REQUIRES(g_pool.lock) {
  if (g_pool.fresh < g_pool.count) return g_pool.fresh++;
  uint32_t i = g_pool.head;
  if (i == kNone) return kNone;
  g_pool.head = g_pool.slots[i].next;
  if (g_pool.head == kNone) g_pool.tail = kNone;
  g_pool.quarantined--;
  return i;
}

// The first byte of [p, end) that is not kFill, or end: eight bytes at a time (a
// small object's fill is most of a page).
const char* first_changed(const char* p, const char* end) {
  constexpr uint64_t kWord = uint64_t{kFill} * 0x0101010101010101ull;
  for (; p < end && (reinterpret_cast<uintptr_t>(p) & 7); p++)
    if (static_cast<uint8_t>(*p) != kFill) return p;
  for (; p + 8 <= end; p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    if (w != kWord) break;
  }
  for (; p < end; p++)
    if (static_cast<uint8_t>(*p) != kFill) return p;
  return end;
}

// Whether the fill around slot i's object is intact; the first changed byte in *bad.
bool fill_intact(const Slot& s, const char** bad) {
  const char* page = pages_start(s);
  const char* end = s.object + s.size;
  const char* limit = page + os::page_up(static_cast<size_t>(end - page));
  if ((*bad = first_changed(page, s.object)) != s.object) return false;
  return (*bad = first_changed(end, limit)) == limit;
}

// An object of `size` bytes (class cls, 0 for a large one; cache's when it is a
// cache's) in a slot, aligned to `align`, or nullptr when no slot can be had. Its
// usable size is `size`: the alignment's slack after it is fill, checked at free.
void* serve(size_t size, size_t align, unsigned cls, const ObjCache* cache) {
  if (t_busy) return nullptr;
  t_busy = true;
  uint32_t i;
  {
    LockGuard g(g_pool.lock);
    i = create_pool() ? take_slot() : kNone;
    if (i != kNone) {
      g_pool.live++;
      g_pool.allocations++;
      // The class with the state: live_in_class reads both under the lock, and a
      // slot's previous class would count it as another cache's live object.
      g_pool.slots[i].cls = static_cast<uint8_t>(cls);
      g_pool.slots[i].state = SlotState::kLive;
    }
  }
  if (i == kNone) {
    t_busy = false;
    return nullptr;
  }
  // The unwinder is opened at the first guarded sample that has a slot, not at
  // start-up (dlopen of libunwind and libgcc_s was a large part of every process's
  // start), nor where the pool cannot be mapped (out of memory: the loader's mapping
  // and objects would take what is left); libgcc's, unless the profiler opened
  // libunwind (stack.h: its pipe).
  prof::stack_init(false);
  prof::Stack st;
  prof::stack_capture(&st);
  Slot& s = g_pool.slots[i];
  // At the end of the area, or at the start of its last pages, the alignment kept:
  // the area ends on a kPageSize boundary (a class aligned beyond a page is a
  // multiple of it; a large object asks for at most a page).
  const bool at_start = at_start_of_pages();
  const size_t unit = at_start && align < os::page_size() ? os::page_size() : align;
  char* obj = area_end(i) - ((size + unit - 1) & ~(unit - 1));
  s.object = obj;
  s.size = static_cast<uint32_t>(size);
  s.alloc_tid = current_tid();
  s.alloc_stack = st;
  s.free_stack.depth = 0;
  s.free_tid = 0;
  s.deferred = false;
  g_pool.spans[i].obj_size = s.size;
  g_pool.spans[i].size_class = s.cls;
  char* page = pages_start(s);
  if (!set_access(page, static_cast<size_t>(area_end(i) - page), true)) {
    LockGuard g(g_pool.lock);
    s.state = SlotState::kBurned;  // left out of use
    g_pool.live--;
    t_busy = false;
    return nullptr;
  }
  memset(page, kFill, static_cast<size_t>(obj - page));
  memset(obj + size, kFill, static_cast<size_t>(area_end(i) - (obj + size)));
  if (cache) {  // as a slab's objects are made (obj_cache.h)
    if (cache->flags & kCachePoison) memset(obj, kPoisonByte, size);
    if (cache->ctor) cache->ctor(obj);
  }
  install_handler();
  USLAB_PROBE(guarded_alloc, obj, size);
  t_busy = false;
  return obj;
}

// The sampling hook (sampler.h): class cls's object in a slot, or nullptr. A size
// class's object is as large as the program asked (an off-by-one write past it
// lands in the slack or the guard, not in the class's rounding); a cache's is its
// class's.
void* guarded_small(unsigned cls, Request r) {
  const ObjCache* cache = cls >= kFirstCacheClass ? obj_cache_of(cls) : nullptr;
  if (cls >= kFirstCacheClass && !cache) return nullptr;
  if (r == kWholeClass || cache) return serve(class_size(cls), 1, cls, cache);
  const size_t size = request_size(r);
  return serve(size ? size : 1, request_align(r), cls, nullptr);
}

constexpr SampleHooks kHooks = {guarded_small};

uint32_t slot_index(const Span* s) { return s->first_page; }

}  // namespace

USLAB_STARTUP_TEXT void init() {
  config_init();
  if (g_config.guard_sample)
    set_sample_client(SampleClient::kGuard, &kHooks, g_config.guard_sample);
}

void* alloc_large(size_t size, size_t align) {
  if (align < 16) align = 16;
  if (((size + align - 1) & ~(align - 1)) > kAreaBytes || align > kPageSize) return nullptr;
  return serve(size, align, 0, nullptr);
}

void free(void* p, Span* span) {
  const uint32_t i = slot_index(span);
  Slot& s = g_pool.slots[i];
  prof::Stack st;
  const bool capture = !t_busy;
  if (capture) {
    t_busy = true;
    prof::stack_capture(&st);
  }
  SlotState was;
  {
    LockGuard g(g_pool.lock);
    was = s.state;
    if (was == SlotState::kLive && p == s.object) s.state = SlotState::kFreeing;
    if (was == SlotState::kOpened && p == s.object) {  // reported at its fault already
      s.state = SlotState::kBurned;
      g_pool.live--;
      t_busy = false;
      return;
    }
  }
  if (was != SlotState::kLive || p != s.object) {
    t_busy = false;
    const bool freed = p == s.object && (was == SlotState::kFreed || was == SlotState::kFreeing);
    report(i, freed ? "double free" : "invalid free", reinterpret_cast<uintptr_t>(p),
           capture ? &st : nullptr);
    return abort_if_configured();
  }
  if (!s.deferred) {  // else the stack of uslab_free_deferred's call stays
    s.free_tid = current_tid();
    s.free_stack = capture ? st : prof::Stack{};
  }
  const char* bad;
  if (!fill_intact(s, &bad)) {
    t_busy = false;
    report(i, bad < s.object ? "underflow (found at free)" : "overflow (found at free)",
           reinterpret_cast<uintptr_t>(bad), nullptr);
    abort_if_configured();
  }
  char* page = pages_start(s);
  const size_t bytes = static_cast<size_t>(area_end(i) - page);
  set_access(page, bytes, false);
  LockGuard g(g_pool.lock);
  s.state = SlotState::kFreed;
  s.next = kNone;
  if (g_pool.tail == kNone)
    g_pool.head = i;
  else
    g_pool.slots[g_pool.tail].next = i;
  g_pool.tail = i;
  g_pool.live--;
  g_pool.quarantined++;
  t_busy = false;
}

void note_deferred(void* p) {
  Span* span = span_of(PageMap::entry(p));
  if (!span || t_busy) return;
  Slot& s = g_pool.slots[slot_index(span)];
  if (s.state.load(std::memory_order_acquire) != SlotState::kLive || p != s.object) return;
  t_busy = true;
  prof::stack_capture(&s.free_stack);
  s.free_tid = current_tid();
  s.deferred = true;
  t_busy = false;
}

size_t live_size(const void* p, Span* span, const char* op) {
  const uint32_t i = slot_index(span);
  const Slot& s = g_pool.slots[i];
  const SlotState state = s.state.load(std::memory_order_acquire);
  if ((state == SlotState::kLive || state == SlotState::kOpened) && p == s.object) return s.size;
  char what[96];
  os::format(what, sizeof what, "%s of a %s pointer", op, p == s.object ? "freed" : "invalid");
  report(i, what, reinterpret_cast<uintptr_t>(p), nullptr);
  abort_if_configured();
  return 0;
}

size_t live_in_class(unsigned cls) {
  LockGuard g(g_pool.lock);
  size_t n = 0;
  for (uint32_t i = 0; i < g_pool.fresh; i++)
    if (const SlotState st = g_pool.slots[i].state.load(std::memory_order_relaxed);
        (st == SlotState::kLive || st == SlotState::kOpened) && g_pool.slots[i].cls == cls)
      n++;
  return n;
}

Stats stats() {
  LockGuard g(g_pool.lock);
  return Stats{g_pool.allocations, __atomic_load_n(&g_pool.reports, __ATOMIC_RELAXED),
               g_pool.base ? g_pool.count : 0, g_pool.live, g_pool.quarantined};
}

}  // namespace uslab::guard
