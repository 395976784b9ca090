// kthost snapshot: read the guest kernel's text from guest RAM and write it
// as a kcore-style ELF with kallsyms and modules beside it.
#include <unistd.h>

#include <cstdio>

#include "command.h"
#include "target.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"
#include "kthost/introspect/kernel_layout.h"
#include "kthost/snapshot/snapshot.h"
#include "kthost/vm/guest_exec.h"
#include "kthost/vm/qmp_client.h"
#include "kthost/vm/vm_description.h"

namespace kt::cli {
namespace {

const char* kName = "snapshot";

// Guest symbols: from files when given, else from the guest through the exec
// channel, else none (ranges are then unnamed, bytes are still read).
Status load_symbols(const Options& opt, const VmDescription& vm, std::string* kallsyms, std::string* modules,
                    GuestSymbols* symbols, std::string* source) {
  if (auto f = opt.get("kallsyms")) {
    KT_ASSIGN_OR_RETURN(*kallsyms, read_file(*f, 256u << 20));
    if (auto m = opt.get("modules")) {
      KT_ASSIGN_OR_RETURN(*modules, read_file(*m, 16u << 20));
    }
    *source = "files";
  } else if (!opt.has("no-guest-symbols") && !vm.exec_channel.empty()) {
    auto exec = GuestExec::connect(vm.exec_channel, std::chrono::seconds(5));
    if (!exec) return exec.error().with_context("exec channel (use --no-guest-symbols to skip)");
    KT_ASSIGN_OR_RETURN(ExecResult ks, exec->run("cat /proc/kallsyms", std::chrono::seconds(120)));
    KT_ASSIGN_OR_RETURN(ExecResult ms, exec->run("cat /proc/modules", std::chrono::seconds(30)));
    if (ks.status != 0 || ks.truncated)
      return Error(ErrorCode::Protocol, "guest: cat /proc/kallsyms failed (status " + std::to_string(ks.status) + ")");
    *kallsyms = std::move(ks.output);
    *modules = ms.status == 0 ? std::move(ms.output) : std::string();
    *source = "guest exec channel";
  } else {
    *source = "none";
    return {};
  }
  KT_TRY(symbols->parse_kallsyms(*kallsyms));
  KT_TRY(symbols->parse_modules(*modules));
  return {};
}

void print_layout(const KernelLayout& layout, const std::string& backend, const std::string& symbol_source,
                  const GuestSymbols& symbols) {
  std::printf("kernel release    %s\n", layout.release.empty() ? "(banner not found)" : layout.release.c_str());
  std::printf("KASLR base        %s (offset %s)\n", hex(layout.text_start).c_str(), hex(layout.kaslr_offset).c_str());
  std::printf("paging            %s%s, root %s (CR3 %s)\n",
              layout.paging.mode == PagingMode::Level5 ? "5-level" : "4-level", layout.pti ? ", PTI" : "",
              hex(layout.paging.root).c_str(), hex(layout.cr3).c_str());
  std::printf("memory backend    %s\n", backend.c_str());
  std::printf("guest symbols     %zu symbols, %zu modules (from %s)\n", symbols.symbols.size(),
              symbols.modules.size(), symbol_source.c_str());
  std::printf("core kernel text  %s - %s  %s\n", hex(layout.text_start).c_str(), hex(layout.text_end).c_str(),
              human_bytes(layout.text_end - layout.text_start).c_str());
  std::printf("text ranges       %zu, %s in all\n", layout.ranges.size(), human_bytes(layout.total_text_bytes()).c_str());
  for (const auto& r : layout.ranges)
    std::printf("  %s - %s  %10s  %-7s %s\n", hex(r.start).c_str(), hex(r.end).c_str(), human_bytes(r.size()).c_str(),
                text_kind_name(r.kind), r.name.c_str());
}

int run(const std::vector<std::string>& args) {
  Options opt;
  target_options(opt);
  opt.value("output", "DIR", "where to write kcore, kallsyms, modules, layout.json (-o)");
  opt.value("backend", "NAME", "guest memory backend: auto (default), mmap, process, xp");
  opt.value("kallsyms", "FILE", "guest /proc/kallsyms text to use instead of asking the guest");
  opt.value("modules", "FILE", "guest /proc/modules text to use with --kallsyms");
  opt.flag("no-guest-symbols", "do not ask the guest for symbols; ranges stay unnamed");
  opt.flag("json", "print the layout as JSON");
  std::vector<std::string> a = args;
  for (auto& s : a)
    if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  auto choice = parse_backend_choice(opt.get_or("backend", "auto"));
  if (!choice) return fail(kName, choice.error());
  auto target = open_target(opt);
  if (!target) return fail(kName, target.error());
  const VmDescription* vm = &target->vm;
  Monitor* qmp = target->monitor.get();

  std::string kallsyms, modules, source;
  GuestSymbols symbols;
  if (auto st = load_symbols(opt, *vm, &kallsyms, &modules, &symbols, &source); !st) return fail(kName, st.error());

  auto memory = open_guest_memory(*qmp, *vm, *choice);
  if (!memory) return fail(kName, memory.error());
  auto regs = read_registers(*qmp, 0);
  if (!regs) return fail(kName, regs.error());
  auto layout = discover_kernel_layout(**memory, *regs, symbols);
  if (!layout) return fail(kName, layout.error());

  SnapshotSummary summary;
  bool have_summary = false;
  if (auto out = opt.get("output")) {
    PageWalker walker(**memory, layout->paging);
    bool tty = ::isatty(2);
    auto result = write_snapshot(walker, *layout, kallsyms, modules, *out, [&](uint64_t done, uint64_t total) {
      if (tty) std::fprintf(stderr, "\rsnapshot: %s / %s", human_bytes(done).c_str(), human_bytes(total).c_str());
    });
    if (tty) std::fprintf(stderr, "\n");
    if (!result) return fail(kName, result.error());
    summary = *result;
    have_summary = true;
  }
  if (opt.has("json")) {
    std::printf("%s\n", layout_to_json(*layout, have_summary ? &summary : nullptr).c_str());
    return 0;
  }
  print_layout(*layout, (*memory)->backend_name(), source, symbols);
  if (have_summary) {
    double mbps = summary.seconds > 0 ? static_cast<double>(summary.bytes_written) / summary.seconds / 1e6 : 0;
    std::printf("snapshot          %s/kcore: %s in %.3f s (%.0f MB/s)\n", opt.get("output")->c_str(),
                human_bytes(summary.bytes_written).c_str(), summary.seconds, mbps);
    if (summary.unreadable_pages)
      std::printf("WARNING           %lu pages were unmapped during the copy (zero-filled), first at %s\n",
                  static_cast<unsigned long>(summary.unreadable_pages), hex(summary.unreadable_addresses[0]).c_str());
  }
  return 0;
}

CommandRegistration reg({kName, "write guest kernel text from guest RAM as a kcore-style ELF", run});

}  // namespace
}  // namespace kt::cli
