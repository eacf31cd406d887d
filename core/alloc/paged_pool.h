// core/alloc/paged_pool.h — fixed-size metadata records that give their memory back.
//
// Owns: PagedPool<T>, a pool of records (the page heaps' Span descriptors) carved from OS pages
// (os::page_size: 4, 16 or 64 KiB) of chunks of 64 pages that it maps for itself, aligned to
// their size, so that a record finds its page's bookkeeping (at the start of its chunk) from its
// address. Each page keeps its own free
// list. Allocation takes from pages in use first, then from wholly free ones, then from purged or
// fresh ones, so the pages emptied after a peak stay empty; purge() returns those that stayed
// wholly free for the age its owner gives (a page heap: one decay tick) (MADV_DONTNEED), and a
// purged page is carved again when it is needed; a chunk whose pages are all purged is unmapped. A
// MetaPool's single free list cannot do that: after a peak of slabs, their descriptors
// stayed resident.
//
// Locking: none of its own. The owner's lock guards every call (a page heap's: its
// descriptors are only made and dropped under it); a lock of the pool's own cost
// two more atomic instructions per split and merge of a span. Records read as zero
// when first carved and after a purge; recycled ones keep their old contents.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ds/ds.h"
#include "core/platform/platform.h"

namespace uslab {

// Bytes of pool pages resident (bookkeeping and carved pages not purged), for the
// metadata figure of the statistics.
inline std::atomic<size_t> g_paged_pool_bytes{0};

template <typename T>
class PagedPool {
 public:
  T* alloc() {
    Page* pg = partial_.front();
    if (!pg && (pg = empty_.front())) {
      empty_.remove(pg);
      partial_.push_front(pg);
    }
    if (!pg) {
      if (clean_.empty() && !grow()) return nullptr;
      pg = clean_.pop_front();
      carve(pg);
      partial_.push_front(pg);
    }
    Link* l = pg->free;
    pg->free = l->next;
    if (--pg->nfree == 0) partial_.remove(pg);
    return reinterpret_cast<T*>(l);
  }

  void free(T* t) {
    Page* pg = page_of(t);
    Link* l = reinterpret_cast<Link*>(t);
    l->next = pg->free;
    pg->free = l;
    if (++pg->nfree == per_page()) {
      if (per_page() > 1) partial_.remove(pg);
      pg->empty_since = os::now_ms();
      empty_.push_front(pg);
    } else if (pg->nfree == 1) {
      partial_.push_front(pg);
    }
  }

  // Whether a wholly free page waits for purge().
  bool has_empty() const { return !empty_.empty(); }

  // Purges the pages wholly free for age_ms (every wholly free one if `all`);
  // returns the bytes purged.
  size_t purge(uint64_t now, uint64_t age_ms, bool all) {
    size_t bytes = 0;
    Page* next;
    for (Page* pg = empty_.front(); pg; pg = next) {
      next = pg->next;
      if (!all && now - pg->empty_since < age_ms) continue;
      empty_.remove(pg);
      os::purge_zeroing(address_of(pg), page());  // a clean page's records read as zero
      pg->free = nullptr;
      pg->nfree = 0;
      clean_.push_front(pg);
      bytes += page();
      if (--carved_pages(pg) == 0) bytes += unmap_chunk(pg);
    }
    g_paged_pool_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    return bytes;
  }

 private:
  // A page is the OS's: a purge of less than one is refused, or wipes the records of
  // the pages beside it. 64 of them: with 4 KiB pages, 256 KiB, so that a shard's heap
  // that carves few spans maps little address space (it counts against RLIMIT_AS).
  static constexpr size_t kPages = 64;
  static size_t page() { return os::page_size(); }
  static size_t chunk() { return kPages * page(); }
  static uint32_t per_page() { return static_cast<uint32_t>(page() / sizeof(T)); }
  static_assert(4096 / sizeof(T) >= 1 && 4096 % alignof(T) == 0);

  struct Link {
    Link* next;
  };
  // Bookkeeping of one page: on partial_ (some records free, some not), empty_ (all
  // free, resident), clean_ (purged or never touched; not carved) or on no list (full).
  struct Page {
    Link* free;
    uint32_t nfree;
    uint64_t empty_since;  // empty_: when its last record came back
    Page* prev;
    Page* next;
  };
  // Pages of bookkeeping at a chunk's start: one for any page size.
  static constexpr size_t kHeaderPages = 1;
  static_assert(kPages * sizeof(Page) <= 4096);

  static Page* page_of(const void* p) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p), chunk = a & ~(PagedPool::chunk() - 1);
    return reinterpret_cast<Page*>(chunk) + (a - chunk) / page();
  }
  // The chunk's count of carved (not clean) pages, kept in the bookkeeping entry of
  // its first page, which holds no records.
  static uint32_t& carved_pages(Page* pg) {
    return reinterpret_cast<Page*>(reinterpret_cast<uintptr_t>(pg) & ~(chunk() - 1))->nfree;
  }
  static char* address_of(Page* pg) {
    uintptr_t c = reinterpret_cast<uintptr_t>(pg) & ~(chunk() - 1);
    return reinterpret_cast<char*>(c) + (pg - reinterpret_cast<Page*>(c)) * page();
  }

  // Maps a chunk; its pages (past the bookkeeping) join clean_, lowest address first.
  bool grow() {
    char* c = static_cast<char*>(os::map_aligned(chunk(), chunk()));
    if (!c) return false;
    os::advise_huge(c, chunk(), false);        // metadata: small pages (os::map_metadata)
    Page* pages = reinterpret_cast<Page*>(c);  // fresh mapping: all zero
    for (size_t i = kPages; i-- > kHeaderPages;) clean_.push_front(&pages[i]);
    g_paged_pool_bytes.fetch_add(kHeaderPages * page(), std::memory_order_relaxed);
    return true;
  }

  // Unmaps the chunk of pg, all of whose pages are clean; returns its bookkeeping bytes.
  // (Address space counts against RLIMIT_AS: a pool that kept its chunks after a
  // peak left a program fewer large blocks once it had freed everything.)
  size_t unmap_chunk(Page* pg) {
    Page* pages = reinterpret_cast<Page*>(reinterpret_cast<uintptr_t>(pg) & ~(chunk() - 1));
    for (size_t i = kHeaderPages; i < kPages; i++) clean_.remove(&pages[i]);
    os::unmap(pages, chunk());
    return kHeaderPages * page();
  }

  // Links every record of a clean page into its free list.
  void carve(Page* pg) {
    char* base = address_of(pg);
    pg->free = nullptr;
    for (uint32_t i = per_page(); i-- > 0;) {
      Link* l = reinterpret_cast<Link*>(base + size_t{i} * sizeof(T));
      l->next = pg->free;
      pg->free = l;
    }
    pg->nfree = per_page();
    carved_pages(pg)++;
    g_paged_pool_bytes.fetch_add(page(), std::memory_order_relaxed);
  }

  IntrusiveList<Page> partial_;
  IntrusiveList<Page> empty_;
  IntrusiveList<Page> clean_;
};

}  // namespace uslab
