// core/alloc/background.cc — the background thread's life and sleep; see
// background.h for when it starts and how it sleeps.
#include "core/alloc/background.h"

#include <sys/syscall.h>

#include "core/alloc/decay.h"
#include "core/alloc/page_heap.h"
#include "core/alloc/percpu.h"

namespace uslab {

constinit std::atomic<uint32_t> g_background_poke{0};
constinit std::atomic<BackgroundState> g_background_state{BackgroundState::kIdle};
constinit std::atomic<uint64_t> g_background_age_due_ms{0};
const LiveHooks* g_live_hooks = nullptr;

namespace {

// 1 while the thread sleeps with no timeout (the futex word it waits on).
constinit std::atomic<uint32_t> sleep_word_{0};
constinit std::atomic<os::ThreadVeto> veto_{os::ThreadVeto::kNone};
int error_ = 0;
constinit std::atomic<uint64_t> started_ms_{0}, wakeups_{0}, sleeps_{0}, ticks_{0};
constinit std::atomic<uint32_t> thread_tid_{0};  // the thread's kernel id, while it lives

// The coarse clock's resolution (a jiffy: 4 ms at HZ=250), and some.
constexpr uint64_t kCoarseSlackMs = 5;

uint32_t* futex_word() { return reinterpret_cast<uint32_t*>(&sleep_word_); }

// The option as an integer: it changes at run time (background_enable), and clang's
// __atomic builtins take integers only.
uint8_t* option_word() { return reinterpret_cast<uint8_t*>(&g_config.background_thread); }

bool configured() {
  return __atomic_load_n(option_word(), __ATOMIC_RELAXED) !=
         static_cast<uint8_t>(Config::Background::kOff);
}

const LiveHooks* live_hooks() { return __atomic_load_n(&g_live_hooks, __ATOMIC_ACQUIRE); }

// Writes the live statistics when a reader asked for them, or always (`now`).
void publish_live(bool now) {
  const LiveHooks* h = live_hooks();
  if (h && (now || h->requested())) h->publish();
}

// Sleeps with no timeout unless the backlog shows work once the sleep is published.
void sleep_until_woken() {
  // Every CPU sheaf closed (they hold nothing now): the next allocation or free
  // anywhere misses, and a miss wakes the thread.
  percpu_drain_all();
  sleep_word_.store(1, std::memory_order_seq_cst);
  g_background_poke.fetch_or(kPokeWake, std::memory_order_seq_cst);
  if (!decay_backlog().work) {
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    publish_live(true);  // exact until something wakes the thread
    while (sleep_word_.load(std::memory_order_acquire) == 1) {
      const LiveHooks* h = live_hooks();
      if (!h || !h->polled()) {
        os::futex_wait(futex_word(), 1);
        continue;
      }
      os::futex_wait_ms(futex_word(), 1, decay_tick_ms());
      if (h->requested()) h->publish();  // a profile asked for while the process idles
    }
    // The waker's work gets its first tick a full interval from now: the tick would
    // otherwise empty the sheaf of the class that has just refilled it.
    decay_postpone_tick();
  } else {
    background_wake();  // take the sleep back
  }
}

void* thread_main(void*) {
  thread_tid_.store(current_tid(), std::memory_order_relaxed);
  for (;;) {
    // Turned off (background_enable), or the program's last thread is gone (main's
    // pthread_exit, a forked child's one thread returning): the thread ends, and with
    // it the process, as glibc ends one whose last thread exits (exit(0)).
    if (!configured() || os::last_live_thread()) {
      g_background_state.store(BackgroundState::kIdle, std::memory_order_release);
      return nullptr;
    }
    uint64_t next = decay_next_tick_ms(), now = os::now_ms();
    if (next != 0 && now >= next) {
      decay_background_tick();
      ticks_.fetch_add(1, std::memory_order_relaxed);
    } else if (next == 0) {
      decay_background_tick();  // starts the clock
    }
    // Huge-page collapses queued a tick ago or more, whoever ran the tick (often an
    // allocation's slow path, in a busy program), are this thread's (page_heap.h).
    page_heap_collapse_all(os::now_ms() - decay_tick_ms());
    publish_live(false);
    if (decay_backlog().work) {
      // Until the tick is due, by the coarse clock the tick reads (a few ms behind
      // the futex's): woken earlier, the thread would find it not due yet.
      next = decay_next_tick_ms();
      now = os::now_ms();
      os::futex_wait_ms(futex_word(), 0, (next > now ? next - now : 0) + kCoarseSlackMs);
    } else if (os::now_ms() < decay_last_call_ms() + decay_tick_ms()) {
      // Nothing to give back, but the program is busy (a start-up still under way):
      // closing the sheaves now would only make it miss on every class. A tick on.
      os::futex_wait_ms(futex_word(), 0, decay_tick_ms());
    } else {
      sleep_until_woken();
    }
    wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void start_now() {
  if (const LiveHooks* h = live_hooks()) h->start();
  int err = os::helper_thread_start(thread_main, "uslab-bg");
  if (err) {
    error_ = err;
    g_background_state.store(BackgroundState::kFailed, std::memory_order_release);
    return;
  }
  started_ms_.store(os::now_ms(), std::memory_order_relaxed);
  // Unless the thread already ended (turned off meanwhile: it set kIdle).
  BackgroundState s = BackgroundState::kStarting;
  g_background_state.compare_exchange_strong(s, BackgroundState::kRunning,
                                             std::memory_order_acq_rel);
}

// A wanted thread, started when this call may (helper_thread_veto); a call from
// inside libc leaves it wanted for the next one.
void try_start() {
  BackgroundState s = BackgroundState::kWanted;
  if (!g_background_state.compare_exchange_strong(s, BackgroundState::kStarting,
                                                  std::memory_order_acq_rel))
    return;
  os::ThreadVeto v = os::helper_thread_veto();
  veto_.store(v, std::memory_order_relaxed);
  if (v == os::ThreadVeto::kLibcCaller || v == os::ThreadVeto::kNotReady) {
    g_background_state.store(BackgroundState::kWanted, std::memory_order_release);
    return;
  }
  g_background_poke.fetch_and(~kPokeStart, std::memory_order_relaxed);
  if (v == os::ThreadVeto::kSeccomp) {  // a filter stays: no further tries
    g_background_state.store(BackgroundState::kFailed, std::memory_order_release);
    return;
  }
  start_now();  // pthread_create allocates: try_start runs again inside, and returns above
}

}  // namespace

// The age at which a process watched live wants the thread (auto only), counted
// from the clock's next reading.
static void arm_age() {
  bool armed = __atomic_load_n(&g_live_hooks, __ATOMIC_ACQUIRE) &&
               g_config.background_thread == Config::Background::kAuto;
  g_background_age_due_ms.store(armed ? kAgeUnread : 0, std::memory_order_relaxed);
}

USLAB_STARTUP_TEXT void background_init() {
  config_init();
  os::helper_thread_init();
  arm_age();
  // `auto` where no later call could start it (helper_thread.h): here, as `true`.
  if (g_config.background_thread != Config::Background::kOn &&
      !(g_config.background_thread == Config::Background::kAuto &&
        os::helper_thread_caller_untestable()))
    return;
  BackgroundState s = BackgroundState::kIdle;
  // The constructor runs with no lock held and outside any free: start at once.
  if (g_background_state.compare_exchange_strong(s, BackgroundState::kStarting)) start_now();
}

void background_want() {
  if (g_background_state.load(std::memory_order_relaxed) != BackgroundState::kIdle || !configured())
    return;
  BackgroundState s = BackgroundState::kIdle;
  if (g_background_state.compare_exchange_strong(s, BackgroundState::kWanted,
                                                 std::memory_order_acq_rel))
    g_background_poke.fetch_or(kPokeStart, std::memory_order_release);
}

void background_age_reached(uint64_t now_ms) {
  uint64_t due = g_background_age_due_ms.load(std::memory_order_relaxed);
  if (due == kAgeUnread) {  // the first reading: the age counts from here
    g_background_age_due_ms.compare_exchange_strong(due, now_ms + kBackgroundLiveAgeMs,
                                                    std::memory_order_relaxed);
    return;
  }
  g_background_age_due_ms.store(0, std::memory_order_relaxed);
  background_want_live();
}

void background_want_live() {
  if (__atomic_load_n(&g_live_hooks, __ATOMIC_ACQUIRE)) background_want();
}

void background_wake() {
  if (sleep_word_.load(std::memory_order_seq_cst) != 1) return;
  if (sleep_word_.exchange(0, std::memory_order_seq_cst) != 1) return;
  g_background_poke.fetch_and(~kPokeWake, std::memory_order_relaxed);
  os::futex_wake(futex_word(), 1);
}

void background_poke_slow() {
  uint32_t p = g_background_poke.load(std::memory_order_acquire);
  if (p & kPokeWake) background_wake();
  if (p & kPokeStart) try_start();
}

BackgroundStats background_stats() {
  BackgroundStats st{};
  st.state = background_state();
  st.veto = veto_.load(std::memory_order_relaxed);
  st.error = error_;
  st.started_ms = started_ms_.load(std::memory_order_relaxed);
  st.wakeups = wakeups_.load(std::memory_order_relaxed);
  st.sleeps = sleeps_.load(std::memory_order_relaxed);
  st.ticks = ticks_.load(std::memory_order_relaxed);
  st.sleeping = sleep_word_.load(std::memory_order_relaxed) == 1;
  return st;
}

void background_describe(const BackgroundStats& st, char* out, size_t cap) {
  config_init();
  const char* mode = g_config.background_thread == Config::Background::kOn    ? "true"
                     : g_config.background_thread == Config::Background::kOff ? "false"
                                                                              : "auto";
  switch (st.state) {
    case BackgroundState::kIdle:
      if (!configured())
        os::format(out, cap,
                   "background thread: off (background_thread=false): memory returns on allocator "
                   "calls\n");
      else
        os::format(
            out, cap,
            "background thread: not started (background_thread=%s: nothing to give back yet)\n",
            mode);
      return;
    case BackgroundState::kWanted:
    case BackgroundState::kStarting:
      os::format(out, cap, "background thread: wanted, not started yet (last try: %s)\n",
                 os::thread_veto_name(st.veto));
      return;
    case BackgroundState::kRunning:
      os::format(out, cap,
                 "background thread: running (background_thread=%s), %s; %zu ticks, %zu wake-ups, "
                 "%zu sleeps with nothing to give back\n",
                 mode, st.sleeping ? "asleep (nothing to give back)" : "ticking",
                 static_cast<size_t>(st.ticks), static_cast<size_t>(st.wakeups),
                 static_cast<size_t>(st.sleeps));
      return;
    case BackgroundState::kFailed:
      if (st.veto == os::ThreadVeto::kSeccomp)
        os::format(out, cap,
                   "background thread: not started (%s): memory returns on allocator calls\n",
                   os::thread_veto_name(st.veto));
      else
        os::format(out, cap,
                   "background thread: could not be created (error %d): memory returns on "
                   "allocator calls\n",
                   st.error);
      return;
  }
}

void background_enable(bool on) {
  config_init();
  __atomic_store_n(option_word(),
                   static_cast<uint8_t>(on ? Config::Background::kOn : Config::Background::kOff),
                   __ATOMIC_RELEASE);
  if (on) {
    g_background_poke.fetch_and(~kPokeStart, std::memory_order_relaxed);
    for (BackgroundState s :
         {BackgroundState::kIdle, BackgroundState::kWanted, BackgroundState::kFailed})
      if (g_background_state.compare_exchange_strong(s, BackgroundState::kStarting))
        return start_now();
    return;
  }
  // The thread sees the option at its next wake-up: wake it whether it sleeps with
  // a timeout or without, then wait for it to end.
  g_background_poke.fetch_and(~(kPokeStart | kPokeWake), std::memory_order_relaxed);
  BackgroundState s = BackgroundState::kWanted;
  g_background_state.compare_exchange_strong(s, BackgroundState::kIdle);
  while (g_background_state.load(std::memory_order_acquire) == BackgroundState::kRunning) {
    sleep_word_.store(0, std::memory_order_seq_cst);
    os::futex_wake(futex_word(), 1);
    os::sleep_ns(1000000);
  }
  // The state changes just before the thread returns; glibc's thread exit and the
  // kernel's follow. Wait (at most a second) until the kernel has released it, so
  // that a program that counts its threads after turning it off sees it gone, as
  // jemalloc's, which joins (in an 8-CPU emulated guest it was still listed).
  if (uint32_t tid = thread_tid_.exchange(0, std::memory_order_relaxed)) {
    long pid = os::syscall6(SYS_getpid);
    for (int i = 0; i < 1000 && os::syscall6(SYS_tgkill, pid, tid, 0) == 0; i++)
      os::sleep_ns(1000000);
  }
}

void background_fork_child() {
  sleep_word_.store(0, std::memory_order_relaxed);
  thread_tid_.store(0, std::memory_order_relaxed);  // the child has no thread
  g_background_poke.store(0, std::memory_order_relaxed);
  wakeups_ = sleeps_ = ticks_ = started_ms_ = 0;
  arm_age();
  BackgroundState s = g_background_state.load(std::memory_order_relaxed);
  if (s == BackgroundState::kFailed) return;
  g_background_state.store(BackgroundState::kIdle, std::memory_order_relaxed);
  // background_thread=true: the child's first slow path starts its own.
  if (g_config.background_thread == Config::Background::kOn) background_want();
}

}  // namespace uslab
