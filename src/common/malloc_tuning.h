#pragma once

namespace exa {

// Keeps glibc malloc from handing freed heap memory back to the kernel after every burst.
//
// By default glibc trims an arena's free top (and, in a thread's arena, whole 64 MiB heaps)
// as soon as it passes a small, adaptive threshold. gRPC receives into 64 KiB slices that one
// thread allocates and another frees, so a weights pull gave memory back and faulted it in
// again for nearly every message: measured on one core, a 2 GiB pull spent ~30 % of its CPU in
// page faults and mprotect/brk (2.25-2.35 s against 1.83-1.92 s with this, pinned 8-stream pull;
// README, Performance > Weights).
//
// Sets M_TRIM_THRESHOLD to 128 MiB (free memory an arena keeps) and M_MMAP_THRESHOLD to 4 MiB
// (blocks below it come from the heap and are reused, not mmap'd and unmapped each time).
// Does nothing when the operator tuned malloc already (MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set). Call first thing in main(), before threads.
void TuneMalloc();

}  // namespace exa
