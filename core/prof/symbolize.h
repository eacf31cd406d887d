// core/prof/symbolize.h — names for the addresses of a heap profile.
//
// Owns: the loaded objects' executable mappings (dl_iterate_phdr: start, end, file
// offset, path, GNU build id) and the function each address falls in, read from the
// objects' ELF symbol tables (.symtab where the file has one, else .dynsym), mapped
// from their files at dump time. An address no table covers keeps its mapping only,
// so that pprof can symbolize it later from the file or its debug info.
//
// Locking: none; one Symbolizer per dump, used by one thread. Everything it holds is
// mapped by itself (no malloc) and unmapped by its destructor.
#pragma once

#include <cstddef>
#include <cstdint>

struct dl_phdr_info;

namespace uslab::prof {

struct Sym;

struct Mapping {
  uintptr_t start, limit, offset, bias;
  char path[256];
  char build_id[48];  // hex, "" when the object has none
  Sym* syms;          // sorted by address, loaded on first use
  size_t nsyms, syms_bytes;
  const char* file;  // the object's file, mapped while symbols are in use
  size_t file_bytes;
  bool loaded;
};

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  size_t count() const { return count_; }
  const Mapping& mapping(size_t i) const { return maps_[i]; }
  // The mapping holding pc, or -1.
  long mapping_of(uintptr_t pc) const;
  // The function holding pc (its symbol's name, NUL-terminated), or nullptr.
  const char* function_of(uintptr_t pc);

 private:
  static constexpr size_t kMaxMappings = 1024;
  Mapping* maps_;
  size_t count_ = 0;
  static int on_object(::dl_phdr_info* info, size_t, void* arg);
  void load(Mapping& m);
};

}  // namespace uslab::prof
