// core/prof/symbolize.cc — mappings and ELF symbol lookup (symbolize.h).
// Locking: none (see symbolize.h).
#include "core/prof/symbolize.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/platform/os.h"

namespace uslab::prof {

struct Sym {
  uintptr_t lo, hi;  // run-time addresses
  const char* name;
  unsigned rank;  // among aliases (one start), the highest is the name shown
};

namespace {

// Which of several names of one address a profile shows: the one a program calls
// (malloc, not __libc_malloc or a library's hidden alias of it), that is a global
// name over a local one, then one without a leading underscore, then the shortest.
unsigned alias_rank(const ElfW(Sym) & sym, const char* name) {
  unsigned bind = ELF64_ST_BIND(sym.st_info);
  size_t len = strnlen(name, 4095);
  return (bind == STB_GLOBAL || bind == STB_WEAK ? 1u << 13 : 0) + (name[0] != '_' ? 1u << 12 : 0) +
         (4095 - static_cast<unsigned>(len));
}

void hex(char* out, size_t cap, const unsigned char* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  size_t i = 0;
  for (; i < n && 2 * i + 2 < cap; i++) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  out[2 * i] = 0;
}

// The GNU build id from the object's notes in memory.
void find_build_id(const dl_phdr_info* info, char* out, size_t cap) {
  out[0] = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof *n;
      const char* desc = name + ((n->n_namesz + 3) & ~3u);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        hex(out, cap, reinterpret_cast<const unsigned char*>(desc), n->n_descsz);
        return;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
}

}  // namespace

Symbolizer::Symbolizer() {
  maps_ = static_cast<Mapping*>(os::map(kMaxMappings * sizeof(Mapping)));
  if (maps_) dl_iterate_phdr(on_object, this);
}

Symbolizer::~Symbolizer() {
  if (!maps_) return;
  for (size_t i = 0; i < count_; i++) {
    if (maps_[i].syms) os::unmap(maps_[i].syms, maps_[i].syms_bytes);
    if (maps_[i].file) os::unmap(const_cast<char*>(maps_[i].file), maps_[i].file_bytes);
  }
  os::unmap(maps_, kMaxMappings * sizeof(Mapping));
}

int Symbolizer::on_object(dl_phdr_info* info, size_t, void* arg) {
  auto* self = static_cast<Symbolizer*>(arg);
  for (int i = 0; i < info->dlpi_phnum && self->count_ < kMaxMappings; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    Mapping& m = self->maps_[self->count_++];
    memset(&m, 0, sizeof m);
    m.bias = info->dlpi_addr;
    m.start = info->dlpi_addr + ph.p_vaddr;
    m.limit = m.start + ph.p_memsz;
    m.offset = ph.p_offset;
    const char* name = info->dlpi_name;
    if (name && name[0]) {
      size_t n = strnlen(name, sizeof m.path - 1);
      memcpy(m.path, name, n);
    } else if (self->count_ == 1) {  // the program itself is listed first, unnamed
      // readlinkat: arm64 has no readlink system call.
      long n = os::syscall6(SYS_readlinkat, AT_FDCWD, reinterpret_cast<long>("/proc/self/exe"),
                            reinterpret_cast<long>(m.path), sizeof m.path - 1);
      m.path[n > 0 ? n : 0] = 0;
    }
    find_build_id(info, m.build_id, sizeof m.build_id);
  }
  return 0;
}

long Symbolizer::mapping_of(uintptr_t pc) const {
  for (size_t i = 0; i < count_; i++)
    if (pc >= maps_[i].start && pc < maps_[i].limit) return static_cast<long>(i);
  return -1;
}

// Maps m's file and gathers its function symbols, sorted.
void Symbolizer::load(Mapping& m) {
  m.loaded = true;
  if (!m.path[0]) return;
  long fd =
      os::syscall6(SYS_openat, AT_FDCWD, reinterpret_cast<long>(m.path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  void* file = reinterpret_cast<void*>(-EBADF);
  if (os::syscall6(SYS_fstat, fd, reinterpret_cast<long>(&st)) == 0 && st.st_size > 0)
    file = reinterpret_cast<void*>(
        os::syscall6(SYS_mmap, 0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0));
  os::syscall6(SYS_close, fd);
  if (reinterpret_cast<long>(file) < 0 && reinterpret_cast<long>(file) > -4096) return;  // -errno
  m.file = static_cast<const char*>(file);
  m.file_bytes = static_cast<size_t>(st.st_size);
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(m.file);
  if (m.file_bytes < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(ElfW(Shdr)) ||
      eh->e_shoff + size_t{eh->e_shnum} * sizeof(ElfW(Shdr)) > m.file_bytes)
    return;
  const auto* sh = reinterpret_cast<const ElfW(Shdr)*>(m.file + eh->e_shoff);
  const ElfW(Shdr)* table = nullptr;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !table)) table = &sh[i];
  if (!table || table->sh_link >= eh->e_shnum || table->sh_entsize != sizeof(ElfW(Sym))) return;
  const ElfW(Shdr)& strs = sh[table->sh_link];
  if (table->sh_offset + table->sh_size > m.file_bytes ||
      strs.sh_offset + strs.sh_size > m.file_bytes)
    return;
  const auto* syms = reinterpret_cast<const ElfW(Sym)*>(m.file + table->sh_offset);
  size_t n = table->sh_size / sizeof(ElfW(Sym));
  m.syms_bytes = (n ? n : 1) * sizeof(Sym);
  m.syms = static_cast<Sym*>(os::map(m.syms_bytes));
  if (!m.syms) return;
  const char* names = m.file + strs.sh_offset;
  for (size_t i = 0; i < n; i++) {
    unsigned type = ELF64_ST_TYPE(syms[i].st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || syms[i].st_shndx == SHN_UNDEF ||
        syms[i].st_name >= strs.sh_size)
      continue;
    uintptr_t lo = m.bias + syms[i].st_value;
    const char* name = names + syms[i].st_name;
    m.syms[m.nsyms++] =
        Sym{lo, lo + (syms[i].st_size ? syms[i].st_size : 1), name, alias_rank(syms[i], name)};
  }
  // By start, aliases by rank: function_of takes the last of a start.
  std::sort(m.syms, m.syms + m.nsyms, [](const Sym& a, const Sym& b) {
    return a.lo < b.lo || (a.lo == b.lo && a.rank < b.rank);
  });
}

const char* Symbolizer::function_of(uintptr_t pc) {
  long i = mapping_of(pc);
  if (i < 0) return nullptr;
  Mapping& m = maps_[i];
  if (!m.loaded) load(m);
  if (!m.nsyms) return nullptr;
  // The last symbol starting at or below pc: of aliases, the best ranked.
  Sym* end = m.syms + m.nsyms;
  Sym* s = std::upper_bound(m.syms, end, pc, [](uintptr_t v, const Sym& x) { return v < x.lo; });
  if (s == m.syms) return nullptr;
  --s;
  return pc < s->hi ? s->name : nullptr;
}

}  // namespace uslab::prof
