// core/prof/write.cc — profile.proto and folded stacks (write.h).
// Locking: none (see write.h).
#include "core/prof/write.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstring>

#include "core/platform/os.h"
#include "core/prof/symbolize.h"

namespace uslab::prof {

namespace {

// A growing byte buffer in a mapping of its own.
struct Buf {
  char* p = nullptr;
  size_t n = 0, cap = 0;
  bool failed = false;

  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() {
    if (p) os::unmap(p, cap);
  }
  bool reserve(size_t more) {
    if (n + more <= cap) return true;
    size_t c = cap ? 2 * cap : 65536;
    while (c < n + more) c *= 2;
    char* q = static_cast<char*>(os::map(c));
    if (!q) {
      failed = true;
      return false;
    }
    if (p) {
      memcpy(q, p, n);
      os::unmap(p, cap);
    }
    p = q;
    cap = c;
    return true;
  }
  void put(const void* d, size_t k) {
    if (k && reserve(k)) {
      memcpy(p + n, d, k);
      n += k;
    }
  }
  void str(const char* s) { put(s, strlen(s)); }
  // Protocol buffers' wire format: varints, keys, length-delimited fields.
  void varint(uint64_t v) {
    char b[10];
    size_t k = 0;
    do {
      b[k++] = static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
      v >>= 7;
    } while (v);
    put(b, k);
  }
  void key(unsigned field, unsigned wire) { varint(uint64_t{field} << 3 | wire); }
  void u64(unsigned field, uint64_t v) {
    key(field, 0);
    varint(v);
  }
  void bytes(unsigned field, const void* d, size_t k) {
    key(field, 2);
    varint(k);
    put(d, k);
  }
  void msg(unsigned field, const Buf& b) { bytes(field, b.p, b.n); }
};

// The profile's string table: each distinct string once, index 0 the empty one.
// Contents are copied into chunks that never move.
class Strings {
 public:
  Strings() { intern("", 0); }
  ~Strings() {
    if (index_) os::unmap(index_, cap_ * sizeof(uint32_t));
    if (entries_) os::unmap(entries_, entries_cap_ * sizeof(Entry));
    for (Chunk* c = chunks_; c;) {
      Chunk* next = c->next;
      os::unmap(c, kChunk);
      c = next;
    }
  }
  uint64_t intern(const char* s) { return intern(s, strlen(s)); }
  uint64_t intern(const char* s, size_t len) {
    if (count_ * 2 >= cap_ && !grow()) return 0;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ULL;
    size_t slot = h & (cap_ - 1);
    for (; index_[slot]; slot = (slot + 1) & (cap_ - 1)) {
      const Entry& e = entries_[index_[slot] - 1];
      if (e.hash == h && e.len == len && memcmp(e.s, s, len) == 0) return index_[slot] - 1;
    }
    const char* copy = store(s, len);
    if (!copy) return 0;
    entries_[count_] = Entry{copy, len, h};
    index_[slot] = static_cast<uint32_t>(++count_);
    return count_ - 1;
  }
  void emit(Buf& out) const {
    for (size_t i = 0; i < count_; i++) out.bytes(6, entries_[i].s, entries_[i].len);
  }

 private:
  struct Entry {
    const char* s;
    size_t len;
    uint64_t hash;
  };
  struct Chunk {
    Chunk* next;
  };
  static constexpr size_t kChunk = 1 << 20;
  uint32_t* index_ = nullptr;
  size_t cap_ = 0, count_ = 0;
  Entry* entries_ = nullptr;
  size_t entries_cap_ = 0;
  Chunk* chunks_ = nullptr;
  char* free_ = nullptr;
  size_t left_ = 0;

  bool grow() {
    size_t cap = cap_ ? 2 * cap_ : 4096;
    auto* idx = static_cast<uint32_t*>(os::map(cap * sizeof(uint32_t)));
    auto* ent = static_cast<Entry*>(os::map(cap / 2 * sizeof(Entry)));
    if (!idx || !ent) {  // neither is kept
      if (idx) os::unmap(idx, cap * sizeof(uint32_t));
      if (ent) os::unmap(ent, cap / 2 * sizeof(Entry));
      return false;
    }
    if (count_) memcpy(ent, entries_, count_ * sizeof(Entry));
    for (size_t i = 0; i < count_; i++) {
      size_t slot = entries_[i].hash & (cap - 1);
      while (idx[slot]) slot = (slot + 1) & (cap - 1);
      idx[slot] = static_cast<uint32_t>(i + 1);
    }
    if (index_) os::unmap(index_, cap_ * sizeof(uint32_t));
    if (entries_) os::unmap(entries_, entries_cap_ * sizeof(Entry));
    index_ = idx;
    cap_ = cap;
    entries_ = ent;
    entries_cap_ = cap / 2;
    return true;
  }
  const char* store(const char* s, size_t len) {
    if (len + 1 > left_) {
      size_t bytes = len + 1 + sizeof(Chunk) > kChunk ? 0 : kChunk;
      if (!bytes) return nullptr;  // a string of a megabyte: not a symbol
      auto* c = static_cast<Chunk*>(os::map(kChunk));
      if (!c) return nullptr;
      c->next = chunks_;
      chunks_ = c;
      free_ = reinterpret_cast<char*>(c + 1);
      left_ = kChunk - sizeof(Chunk);
    }
    char* d = free_;
    memcpy(d, s, len);
    d[len] = 0;
    free_ += len + 1;
    left_ -= len + 1;
    return d;
  }
};

// Addresses to small numbers (the profile's location ids), open addressing.
class AddressIds {
 public:
  ~AddressIds() {
    if (slots_) os::unmap(slots_, cap_ * sizeof(Slot));
  }
  bool init(size_t n) {
    cap_ = 1024;
    while (cap_ < 2 * n + 2) cap_ *= 2;
    slots_ = static_cast<Slot*>(os::map(cap_ * sizeof(Slot)));
    return slots_ != nullptr;
  }
  // The id of pc (1 + its order of first sight); *fresh when new.
  uint64_t id(uintptr_t pc, bool* fresh) {
    size_t s = (pc * 0x9e3779b97f4a7c15ULL >> 17) & (cap_ - 1);
    for (; slots_[s].pc; s = (s + 1) & (cap_ - 1))
      if (slots_[s].pc == pc) {
        *fresh = false;
        return slots_[s].id;
      }
    slots_[s] = Slot{pc, ++count_};
    *fresh = true;
    return count_;
  }

 private:
  struct Slot {
    uintptr_t pc;
    uint64_t id;
  };
  Slot* slots_ = nullptr;
  size_t cap_ = 0;
  uint64_t count_ = 0;
};

// The function a call returning to `ret` called: the call's target, through the PLT
// stub or GOT slot it went by (call rel32; call *GOT(%rip) as with -fno-plt; a PLT
// stub's jmp *GOT(%rip), after an endbr64 and bnd prefix). 0 when not a direct call
// (a call through a register: the target is gone).
// Bytes that only look like a call (the tail of a call through a register) give an
// address anywhere: every read goes through os::read_memory, which fails on an
// unmapped address instead of faulting.
uintptr_t call_target(uintptr_t ret) {
  unsigned char b[6];
  int32_t d;
  uintptr_t target;
  if (!os::read_memory(ret - 6, b, 6)) return 0;
  memcpy(&d, b + 2, 4);
  if (b[0] == 0xff && b[1] == 0x15)
    return os::read_memory(ret + d, &target, sizeof target) ? target : 0;
  if (b[1] != 0xe8) return 0;
  target = ret + d;
  unsigned char stub[16];
  if (!os::read_memory(target, stub, sizeof stub)) return 0;
  for (unsigned i = 0; i + 6 <= sizeof stub; i++)
    if (stub[i] == 0xff && stub[i + 1] == 0x25) {
      memcpy(&d, stub + i + 2, 4);
      uintptr_t fn;
      return os::read_memory(target + i + 6 + d, &fn, sizeof fn) ? fn : 0;
    }
  return target;
}

// The allocator label of a stack: what its innermost frame called, by name.
const char* entry_label(Symbolizer& sym, const StackView& s) {
  if (!s.depth) return nullptr;
  uintptr_t fn = call_target(s.frames[0]);
  const char* name = fn ? sym.function_of(fn) : nullptr;
  if (!name) return nullptr;
  if (strncmp(name, "_Znw", 4) == 0) return "operator new";
  if (strncmp(name, "_Zna", 4) == 0) return "operator new[]";
  return name;
}
int64_t rounded(double v) { return v > 0 ? static_cast<int64_t>(v + 0.5) : 0; }

const char* base_name(const char* path) {
  const char* b = strrchr(path, '/');
  return b ? b + 1 : path;
}

// A frame's name in folded stacks: its function, or object+offset.
void frame_name(Buf& out, Symbolizer& sym, uintptr_t pc) {
  if (const char* f = sym.function_of(pc)) return out.str(f);
  char buf[320];
  long m = sym.mapping_of(pc);
  if (m >= 0)
    os::format(buf, sizeof buf, "%s+0x%lx",
               base_name(sym.mapping(m).path[0] ? sym.mapping(m).path : "?"),
               static_cast<unsigned long>(pc - sym.mapping(m).start + sym.mapping(m).offset));
  else
    os::format(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(pc));
  out.str(buf);
}

int write_file(const char* path, const Buf& b) {
  if (b.failed) return ENOMEM;
  long fd = os::syscall6(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path),
                         O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return static_cast<int>(-fd);
  size_t done = 0;
  int err = 0;
  while (done < b.n) {
    long k = os::syscall6(SYS_write, fd, reinterpret_cast<long>(b.p + done),
                          static_cast<long>(b.n - done));
    if (k == -EINTR) continue;
    if (k <= 0) {
      err = k < 0 ? static_cast<int>(-k) : EIO;
      break;
    }
    done += static_cast<size_t>(k);
  }
  os::syscall6(SYS_close, fd);
  return err;
}

// The folded stacks of one column (inuse or alloc bytes).
int write_folded(const char* path, const char* suffix, const StackView* stacks, size_t n,
                 Symbolizer& sym, bool inuse) {
  Buf out;
  for (size_t i = 0; i < n; i++) {
    const StackView& s = stacks[i];
    int64_t v = rounded(inuse ? s.inuse_bytes : s.alloc_bytes);
    if (v <= 0) continue;
    for (unsigned f = s.depth; f-- > 0;) {
      frame_name(out, sym, s.frames[f] - 1);
      if (f) out.put(";", 1);
    }
    if (const char* e = entry_label(sym, s)) {
      if (s.depth) out.put(";", 1);
      out.str(e);
    }
    char num[32];
    out.put(num, os::format(num, sizeof num, " %ld\n", static_cast<long>(v)));
  }
  char name[600];
  os::format(name, sizeof name, "%s%s", path, suffix);
  return write_file(name, out);
}

}  // namespace

int write_profile(const char* path, const StackView* stacks, size_t n, const ProfileInfo& info) {
  Symbolizer sym;
  Strings strings;
  AddressIds ids;
  size_t frames = 0;
  for (size_t i = 0; i < n; i++) frames += stacks[i].depth;
  if (!ids.init(frames)) return ENOMEM;
  Buf body, msg, packed, label, line;

  // Sample types, as Go's heap profiles name them.
  static const char* const kTypes[4][2] = {{"alloc_objects", "count"},
                                           {"alloc_space", "bytes"},
                                           {"inuse_objects", "count"},
                                           {"inuse_space", "bytes"}};
  for (const auto& t : kTypes) {
    msg.n = 0;
    msg.u64(1, strings.intern(t[0]));
    msg.u64(2, strings.intern(t[1]));
    body.msg(1, msg);
  }

  // Samples, and the locations they name (added to `locs` as first seen).
  Buf locs;
  bool* resolved_map = static_cast<bool*>(os::map(sym.count() + 1));
  bool* unresolved_map = static_cast<bool*>(os::map(sym.count() + 1));
  if (!resolved_map || !unresolved_map) return ENOMEM;
  const uint64_t k_allocator = strings.intern("allocator"), k_class = strings.intern("class"),
                 k_bytes = strings.intern("bytes");
  for (size_t i = 0; i < n; i++) {
    const StackView& s = stacks[i];
    int64_t values[4] = {rounded(s.alloc_objects), rounded(s.alloc_bytes), rounded(s.inuse_objects),
                         rounded(s.inuse_bytes)};
    if (!values[0] && !values[1] && !values[2] && !values[3]) continue;
    packed.n = 0;
    for (unsigned f = 0; f < s.depth; f++) {
      uintptr_t addr = s.frames[f] - 1;  // a return address: the call is the byte before
      bool fresh;
      uint64_t id = ids.id(addr, &fresh);
      packed.varint(id);
      if (!fresh) continue;
      // The location: its mapping and, where a symbol table names it, its function
      // (one function per distinct name; its id is the name's string index).
      Buf& loc = label;
      loc.n = 0;
      loc.u64(1, id);
      long m = sym.mapping_of(addr);
      if (m >= 0) loc.u64(2, static_cast<uint64_t>(m) + 1);
      loc.u64(3, addr);
      if (const char* fn = sym.function_of(addr)) {
        line.n = 0;
        line.u64(1, strings.intern(fn));  // function id = name index (never 0: "" is not a name)
        loc.msg(4, line);
        if (m >= 0) resolved_map[m] = true;
      } else if (m >= 0) {
        unresolved_map[m] = true;
      }
      locs.msg(4, loc);
    }
    msg.n = 0;
    msg.msg(1, packed);
    packed.n = 0;
    for (int64_t v : values) packed.varint(static_cast<uint64_t>(v));
    msg.msg(2, packed);
    auto add_label = [&](uint64_t key, const char* str, int64_t num) {
      label.n = 0;
      label.u64(1, key);
      if (str)
        label.u64(2, strings.intern(str));
      else {
        label.u64(3, static_cast<uint64_t>(num));
        label.u64(4, k_bytes);
      }
      msg.msg(3, label);
    };
    if (const char* e = entry_label(sym, s)) add_label(k_allocator, e, 0);
    if (s.cls) {
      char buf[48];
      if (s.cache[0])
        add_label(k_class, s.cache, 0);
      else {
        os::format(buf, sizeof buf, "%u", s.class_bytes);
        add_label(k_class, buf, 0);
      }
      add_label(k_bytes, nullptr, s.class_bytes);
    }
    body.msg(2, msg);
  }

  // Mappings: every executable mapping of a loaded object; has_functions only where
  // every location in it was named (pprof symbolizes the others from the files).
  for (size_t m = 0; m < sym.count(); m++) {
    const Mapping& mp = sym.mapping(m);
    msg.n = 0;
    msg.u64(1, m + 1);
    msg.u64(2, mp.start);
    msg.u64(3, mp.limit);
    msg.u64(4, mp.offset);
    msg.u64(5, strings.intern(mp.path));
    msg.u64(6, strings.intern(mp.build_id));
    msg.u64(7, resolved_map[m] && !unresolved_map[m]);
    body.msg(3, msg);
  }
  body.put(locs.p, locs.n);
  os::unmap(resolved_map, sym.count() + 1);
  os::unmap(unresolved_map, sym.count() + 1);

  // Functions: one per distinct name the locations use (its id is the name's string
  // index).
  Buf funcs;
  {
    AddressIds seen;
    if (!seen.init(frames)) return ENOMEM;
    for (size_t i = 0; i < n; i++)
      for (unsigned f = 0; f < stacks[i].depth; f++) {
        const char* fn = sym.function_of(stacks[i].frames[f] - 1);
        if (!fn) continue;
        uint64_t idx = strings.intern(fn);
        bool fresh;
        seen.id(idx, &fresh);
        if (!fresh) continue;
        msg.n = 0;
        msg.u64(1, idx);
        msg.u64(2, idx);
        msg.u64(3, idx);
        body.msg(5, msg);
      }
  }

  // Scalars: when, how long, the period (bytes per sample) and the default type.
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  body.u64(9,
           static_cast<uint64_t>(wall.tv_sec) * 1000000000 + static_cast<uint64_t>(wall.tv_nsec));
  body.u64(10, info.now_ns > info.start_ns ? info.now_ns - info.start_ns : 0);
  msg.n = 0;
  msg.u64(1, strings.intern("space"));
  msg.u64(2, k_bytes);
  body.msg(11, msg);
  body.u64(12, info.sample_bytes);
  body.u64(14, strings.intern("inuse_space"));
  strings.emit(body);

  if (int err = write_file(path, body)) return err;
  if (int err = write_folded(path, ".inuse.folded", stacks, n, sym, true)) return err;
  return write_folded(path, ".alloc.folded", stacks, n, sym, false);
}

}  // namespace uslab::prof
