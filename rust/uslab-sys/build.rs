// Builds uslab's core from the crate's copy of the sources (core/sources.txt, the list
// meson.build uses, with core/flags.txt's flags) into a static library linked whole:
// its constructor (fork handlers) and exit hook are referenced by nothing else.
// With the `system` feature (or USLAB_SYS_SYSTEM=1) links the installed libuslab.so.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn var(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={}", name);
    env::var(name).ok().filter(|v| !v.is_empty())
}

fn feature(name: &str) -> bool {
    env::var_os(format!("CARGO_FEATURE_{}", name.to_uppercase())).is_some()
}

// The non-comment lines of one of core/'s lists, split into words.
fn list(root: &Path, name: &str) -> Vec<Vec<String>> {
    let path = root.join("core").join(name);
    println!("cargo:rerun-if-changed={}", path.display());
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("uslab-sys: cannot read {}: {}", path.display(), e));
    text.lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|w| !w.is_empty() && !w[0].starts_with('#'))
        .collect()
}

fn link_system() {
    if let Some(dir) = var("USLAB_SYS_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
    } else if let Ok(out) = Command::new("pkg-config").args(["--libs-only-L", "uslab"]).output() {
        for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={}", dir);
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=uslab");
}

// Debian has no C++ compiler for musl: g++ with musl's headers first (the recipe of
// tools/musl-toolchain.sh, which writes the command's words to cxx.args).
fn musl_compiler(root: &Path, out: &Path, build: &mut cc::Build) {
    let dir = out.join("musl-toolchain");
    let script = root.join("musl-toolchain.sh");
    let status = Command::new("bash").arg(&script).arg(&dir).status();
    if !matches!(status, Ok(s) if s.success()) {
        panic!(
            "uslab-sys: no C++ compiler for musl: install musl-tools and musl-dev (Debian), \
             or set CXX_{} to one",
            env::var("TARGET").unwrap().replace('-', "_")
        );
    }
    let args = fs::read_to_string(dir.join("cxx.args")).expect("musl-toolchain.sh wrote cxx.args");
    let mut words = args.lines().filter(|l| !l.is_empty());
    build.compiler(words.next().expect("a compiler"));
    for w in words {
        build.flag(w);
    }
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let target = env::var("TARGET").unwrap();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let crt_static = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default().contains("crt-static");
    println!("cargo:rerun-if-changed=build.rs");
    if os != "linux" || !(arch == "x86_64" || arch == "aarch64") {
        panic!("uslab-sys: uslab runs on Linux, x86_64 and aarch64 (target {})", target);
    }
    println!("cargo:include={}", root.join("include").display());
    if feature("system") || var("USLAB_SYS_SYSTEM").as_deref() == Some("1") {
        link_system();
        return;
    }

    let glibc = target_env == "gnu";
    let mut sources = Vec::new();
    for words in list(&root, "sources.txt") {
        match words.get(1).map(String::as_str) {
            Some("glibc") if !glibc => continue,
            Some("fault_injection") => continue,
            _ => sources.push(words[0].clone()),
        }
    }
    sources.extend(["preload/init.cc", "preload/api.cc", "preload/prefixed.cc", "compat/mallctl.cc"].map(String::from));
    let overriding = feature("override");
    if overriding {
        sources.extend(["preload/shim.cc", "preload/new_delete.cc", "compat/jemalloc.cc"].map(String::from));
        if glibc {
            sources.push("compat/glibc.cc".into());
        }
    }
    for dir in ["core", "include", "preload", "compat"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }

    let mut build = cc::Build::new();
    build.cpp(true).cpp_link_stdlib(None).cargo_metadata(false);
    if target_env == "musl" && var(&format!("CXX_{}", target.replace('-', "_"))).is_none()
        && var(&format!("CXX_{}", target)).is_none() && var("TARGET_CXX").is_none()
    {
        musl_compiler(&root, &out, &mut build);
    }
    // As the C library ships: optimised whatever the profile (the fast paths are
    // written for it), debug info for perf, no assertions.
    build.opt_level(3).debug(true).warnings(false).include(&root);
    build.flag("-std=c++20").flag("-pthread").define("NDEBUG", None);
    for words in list(&root, "flags.txt") {
        build.flag(&words[0]);
    }
    if arch == "x86_64" {
        build.flag_if_supported("-Wa,-mbranches-within-32B-boundaries");
    }
    build.define("USLAB_DEBUG_CHECKS", "0").define("_FILE_OFFSET_BITS", "64");
    if !feature("hwloc") {
        build.define("USLAB_NO_HWLOC", "1");
    }
    if !overriding {
        build.define("USLAB_NO_OVERRIDE", "1");
    }
    if glibc && crt_static {
        // A static glibc binary: no dynamic loader to open hwloc or the unwinder with.
        build.define("USLAB_STATIC_ARCHIVE", "1");
    }
    for s in &sources {
        build.file(root.join(s));
    }
    build.compile("uslab");
    println!("cargo:rustc-link-search=native={}", out.display());
    // aarch64: GCC's outline atomics resolve to Rust's compiler-builtins.
    println!("cargo:rustc-link-lib=static:+whole-archive=uslab");
    if target_env == "musl" {
        // A static musl link places libc.a where the crates that use it are; the core
        // uses it too, after them.
        println!("cargo:rustc-link-lib=c");
    }
}
