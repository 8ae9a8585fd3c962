#pragma once

namespace exa {

// On a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP) writes the signal, the
// faulting address and a symbolized stack of the thread that took it to stderr, then
// re-raises it so the exit status and any core dump are what they would have been. A daemon that
// dies in production or in CI leaves a report in its log (docs/operations.md#crash-reports).
// Call first thing in main(), before threads; argv0 is main's argv[0].
void InstallCrashReport(const char* argv0);

}  // namespace exa
