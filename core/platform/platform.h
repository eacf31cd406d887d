// core/platform/platform.h — umbrella of the platform layer (raw syscalls, the
// futex Mutex, run-time configuration, rseq registration, the topology providers,
// the control group's memory limit, what the kernel offers, starting the allocator's
// own thread, USDT probes, what AddressSanitizer is told of the heap: track.h).
// Higher layers include this header only.
#pragma once

#include "core/platform/cgroup.h"
#include "core/platform/config.h"
#include "core/platform/helper_thread.h"
#include "core/platform/kernel_features.h"
#include "core/platform/mutex.h"
#include "core/platform/os.h"
#include "core/platform/probe.h"
#include "core/platform/rseq.h"
#include "core/platform/topology.h"
#include "core/platform/track.h"
