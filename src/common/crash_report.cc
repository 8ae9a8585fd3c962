#include "common/crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/debugging/symbolize.h"

namespace exa {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP};
constexpr int kMaxFrames = 64;
// Room to report a stack overflow of the main thread (the others report on their own stacks).
constexpr size_t kAltStackBytes = 64 * 1024;

// Everything below runs inside a signal handler: no allocation, no locks, no stdio; write(2)
// of a buffer formatted by hand, absl::Symbolize (async-signal-safe) and, for a library without
// symbols, dladdr.
void WriteAll(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}
void Write(const char* s) { WriteAll(s, std::strlen(s)); }

// Appends v in hex ("0x..."), without snprintf.
char* AppendHex(char* out, uintptr_t v) {
  char digits[2 * sizeof(v)];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  *out++ = '0';
  *out++ = 'x';
  while (n > 0) *out++ = digits[--n];
  return out;
}
// Appends as much of s as fits before end.
char* Append(char* out, const char* end, const char* s) {
  size_t n = std::min(std::strlen(s), static_cast<size_t>(end - out));
  std::memcpy(out, s, n);
  return out + n;
}
char* AppendDecimal(char* out, long v) {
  char digits[24];
  int n = 0;
  if (v < 0) *out++ = '-', v = -v;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

const char* SignalName(int signo) {
  switch (signo) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGABRT:
      return "SIGABRT";
    case SIGTRAP:
      return "SIGTRAP";
    default:
      return "signal";
  }
}

void ReportFrames() {
  void* frames[kMaxFrames];
  int n = ::backtrace(frames, kMaxFrames);
  for (int i = 0; i < n; ++i) {
    char line[512];
    char* p = Append(line, line + sizeof(line), "    @ ");
    p = AppendHex(p, reinterpret_cast<uintptr_t>(frames[i]));
    *p++ = ' ';
    // A return address points past its call: symbolize the byte before it.
    char name[384];
    void* pc = i == 0 ? frames[i] : static_cast<char*>(frames[i]) - 1;
    if (absl::Symbolize(pc, name, sizeof(name))) {
      p = Append(p, line + sizeof(line) - 2, name);
    } else if (Dl_info dl{}; ::dladdr(pc, &dl) != 0 && dl.dli_fname != nullptr) {
      // A library without a symbol table: its file and the offset in it, for addr2line.
      p = Append(p, line + sizeof(line) - 24, dl.dli_fname);
      *p++ = '+';
      p = AppendHex(p, reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(dl.dli_fbase));
    } else {
      p = Append(p, line + sizeof(line) - 2, "(unknown)");
    }
    *p++ = '\n';
    WriteAll(line, static_cast<size_t>(p - line));
  }
}

void OnFatalSignal(int signo, siginfo_t* info, void*) {
  char head[160];
  const char* end = head + sizeof(head);
  char* p = Append(head, end, "*** ");
  p = Append(p, end, SignalName(signo));
  p = Append(p, end, " received: address ");
  p = AppendHex(p, reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr));
  p = Append(p, end, ", thread ");
  p = AppendDecimal(p, ::syscall(SYS_gettid));
  p = Append(p, end, ", pid ");
  p = AppendDecimal(p, ::getpid());
  p = Append(p, end, " ***\n");
  WriteAll(head, static_cast<size_t>(p - head));
  ReportFrames();
  Write("*** end of crash report\n");
  // Die of the same signal, as without the report: the default action, raised again.
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

}  // namespace

void InstallCrashReport(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  // backtrace() loads libgcc's unwinder on first use, which allocates: do it now, not in the
  // handler.
  void* warm[1];
  (void)::backtrace(warm, 1);
  stack_t alt{};
  alt.ss_sp = std::malloc(kAltStackBytes);  // lives as long as the process
  alt.ss_size = kAltStackBytes;
  if (alt.ss_sp != nullptr) ::sigaltstack(&alt, nullptr);
  struct sigaction action {};
  action.sa_sigaction = OnFatalSignal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (int signo : kFatalSignals) ::sigaction(signo, &action, nullptr);
}

}  // namespace exa
