#include "kthost/agent/domain_tracer.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include <unistd.h>

#include "kthost/agent/backoff.h"
#include "kthost/agent/budget.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/libvirt/libvirt_domain.h"
#include "kthost/trace/trace_session.h"

namespace kt {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
// How long after QEMU starts a failure to open the guest's kernel is taken
// for a guest still booting, not a failure.
constexpr double kBootSeconds = 180;
constexpr double kSameRebootSeconds = 10;
constexpr const char* kWaitingForKernel = "waiting for the guest kernel: ";

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// PT bytes per second over the last few seconds of samples.
class RateWindow {
 public:
  void add(Clock::time_point t, uint64_t bytes) {
    samples_.emplace_back(t, bytes);
    while (samples_.size() > 2 && seconds_between(samples_.front().first, t) > 5) samples_.pop_front();
  }
  double rate() const {
    if (samples_.size() < 2) return 0;
    double dt = seconds_between(samples_.front().first, samples_.back().first);
    return dt < 1 ? 0 : double(samples_.back().second - samples_.front().second) / dt;
  }
  void clear() { samples_.clear(); }

 private:
  std::deque<std::pair<Clock::time_point, uint64_t>> samples_;
};

}  // namespace

const char* tracer_state_name(TracerState state) {
  switch (state) {
    case TracerState::Opening: return "opening";
    case TracerState::Tracing: return "tracing";
    case TracerState::Backoff: return "backoff";
    case TracerState::OverBudget: return "overbudget";
    case TracerState::Ended: return "ended";
  }
  return "?";
}

namespace {

// Field 22 of /proc/PID/stat: when the process started, in clock ticks after
// the host booted.
Result<uint64_t> process_start_ticks(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  KT_ASSIGN_OR_RETURN(std::string stat, read_file(path, 4096));
  // The fields count from after the comm field, which may hold spaces and
  // parentheses: start at the last ')'.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return Error(ErrorCode::InvalidInput, path + ": no ')' after the command name");
  std::vector<std::string_view> words;
  for (auto f : split(std::string_view(stat).substr(close + 1), ' '))
    if (!f.empty()) words.push_back(f);
  // words[0] is field 3 (state), so field 22 is words[19].
  auto ticks = words.size() >= 20 ? parse_u64(words[19], 10) : std::nullopt;
  if (!ticks) return Error(ErrorCode::InvalidInput, path + ": no start time in field 22");
  return *ticks;
}

uint64_t clock_ticks_per_second() {
  long hz = ::sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<uint64_t>(hz) : 100;
}

// How long the process has run; a large age when it cannot be read.
double process_age_seconds(int pid) {
  auto ticks = process_start_ticks(pid);
  auto uptime = read_file("/proc/uptime", 256);
  if (!ticks || !uptime) return 1e9;
  double up = std::strtod(uptime->c_str(), nullptr);
  return up - static_cast<double>(*ticks) / static_cast<double>(clock_ticks_per_second());
}

}  // namespace

Result<std::string> boot_id_of_process(int pid) {
  KT_ASSIGN_OR_RETURN(uint64_t ticks, process_start_ticks(pid));
  KT_ASSIGN_OR_RETURN(std::string proc_stat, read_file("/proc/stat", 1 << 20));
  std::optional<uint64_t> btime;
  for (auto line : split(proc_stat, '\n'))
    if (starts_with(line, "btime ")) btime = parse_u64(trim(line.substr(6)), 10);
  if (!btime) return Error(ErrorCode::InvalidInput, "/proc/stat: no btime line");
  std::time_t started = static_cast<std::time_t>(*btime + ticks / clock_ticks_per_second());
  std::tm tm{};
  ::gmtime_r(&started, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf) + "-pid" + std::to_string(pid);
}

// The thread's own state. Only run() touches it.
struct DomainTracer::Run {
  std::shared_ptr<LibvirtDomain> domain;
  std::unique_ptr<Monitor> monitor;
  std::unique_ptr<TraceSession> session;
  int qemu_pid = 0;
  std::string boot_base;  // boot_id without the -rN of reboots in place
  int reboots = 0;
  Clock::time_point rebooted_at{};  // the last reboot in place
  Backoff backoff;
  Clock::time_point state_since = Clock::now(), retry_at{}, session_start{}, last_check{};
  std::optional<BudgetBreach> breach;
  RateWindow pt_rate;
  bool tables_checked = false;  // the session's page tables were checked once the guest was ready
  uint64_t lost_before = 0, pt_before = 0, text_before = 0, events_before = 0, holds_before = 0;
};

DomainTracer::DomainTracer(std::string name, const AgentConfig& config, const AgentGauges& gauges, Log log)
    : name_(std::move(name)), config_(config), gauges_(gauges), log_(std::move(log)) {
  status_.name = name_;
  status_.state = tracer_state_name(TracerState::Opening);
  thread_ = std::thread([this] { run(); });
}

DomainTracer::~DomainTracer() {
  request_stop("the agent is stopping");
  if (thread_.joinable()) thread_.join();
}

void DomainTracer::request_stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_reason_.empty()) stop_reason_ = reason;
  wake_.notify_all();
}

void DomainTracer::request_new_boot(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // libvirt may report one reset twice (the API call and QEMU's RESET
  // event): a second report within a few seconds is the same reboot.
  auto now = std::chrono::steady_clock::now();
  bool same = last_new_boot_ && now - *last_new_boot_ < std::chrono::duration<double>(kSameRebootSeconds);
  last_new_boot_ = now;
  if (same) return;
  new_boot_reason_ = reason;
  wake_.notify_all();
}

void DomainTracer::retry_now() {
  std::lock_guard<std::mutex> lock(mu_);
  retry_now_ = true;
  wake_.notify_all();
}

DomainStatus DomainTracer::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void DomainTracer::set_state(TracerState state) {
  state_ = state;
  std::lock_guard<std::mutex> lock(mu_);
  status_.state = tracer_state_name(state);
}

void DomainTracer::wait_for(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, std::chrono::duration<double>(seconds),
                 [this] { return !stop_reason_.empty() || !new_boot_reason_.empty() || retry_now_; });
}

void DomainTracer::run() {
  Run r;
  r.backoff = Backoff(config_.retry_max_seconds);
  fs::path domain_dir = fs::path(config_.output_dir) / sanitize_name(name_, 200);
  auto say = [this](const std::string& text) { if (log_) log_("domain " + name_ + ": " + text); };
  auto stop_requested = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_reason_;
  };
  auto take_new_boot = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(new_boot_reason_, std::string());
  };
  auto boot_id = [&r] { return r.reboots ? r.boot_base + "-r" + std::to_string(r.reboots) : r.boot_base; };
  auto use_now = [&](double pt_rate) {
    return BudgetUse{gauges_.total_disk_bytes.load(), directory_bytes(domain_dir.string()), gauges_.memory_bytes.load(), pt_rate};
  };
  // Ends the current bundle, keeping its counts in the domain's totals.
  auto close_session = [&](const std::string& reason) {
    if (!r.session) return;
    auto p = r.session->progress();
    auto summary = r.session->finish(reason);
    std::string end = r.session->failed() ? r.session->end_reason() : reason;
    r.session.reset();
    uint64_t disk = directory_bytes(domain_dir.string());
    std::lock_guard<std::mutex> lock(mu_);
    status_.disk_bytes = disk;
    r.lost_before += summary ? summary->losses.total() : p.lost;
    r.pt_before += summary ? summary->pt_bytes : p.pt_bytes;
    r.text_before += p.text_bytes, r.events_before += p.events, r.holds_before += p.holds;
    status_.lost = r.lost_before, status_.pt_bytes = r.pt_before, status_.text_bytes = r.text_before;
    status_.events = r.events_before, status_.holds = r.holds_before;
    status_.ready = false;
    status_.last_end_reason = end;
    if (!summary) status_.last_error = "closing " + status_.bundle + ": " + summary.error().message;
    say("bundle " + status_.bundle + " closed: " + end);
  };
  auto fail_and_back_off = [&](const std::string& what) {
    double delay = r.backoff.next();
    r.retry_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_.failures++;
      status_.last_error = what;
    }
    say(what + "; retrying in " + std::to_string(int(delay)) + " s");
    set_state(TracerState::Backoff);
  };
  auto end_tracer = [&](const std::string& why) {
    close_session(why);
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_.last_end_reason = why;
      status_.retry_in_seconds = 0;
    }
    say("ended: " + why);
    set_state(TracerState::Ended);
  };
  auto untraced_since = [&](Clock::time_point since) {
    std::lock_guard<std::mutex> lock(mu_);
    status_.untraced_seconds += seconds_between(since, Clock::now());
  };

  for (;;) {
    std::string stop = stop_requested();
    if (!stop.empty()) return end_tracer(stop);
    switch (state_.load()) {
      case TracerState::Opening: {
        auto d = LibvirtDomain::open(config_.uri, name_);
        if (!d) {
          if (d.error().code == ErrorCode::NotPresent || d.error().code == ErrorCode::Unsupported)
            return end_tracer("the domain is gone: " + d.error().message);
          fail_and_back_off("opening the domain: " + d.error().message);
          break;
        }
        int pid = d->description().pid;
        if (r.qemu_pid && pid != r.qemu_pid)
          return end_tracer("the domain was restarted (QEMU pid " + std::to_string(r.qemu_pid) + " -> " +
                            std::to_string(pid) + "): a new tracer follows it");
        if (!r.qemu_pid) {
          for (const auto& w : d->warnings()) say("warning: " + w);  // e.g. no shared RAM: process memory, and why
          for (const auto& n : d->notes()) say(n);                    // e.g. a pod's namespaces
          auto id = boot_id_of_process(pid);
          r.qemu_pid = pid;
          r.boot_base = id ? *id : "pid" + std::to_string(pid);
        }
        r.domain = std::make_shared<LibvirtDomain>(std::move(*d));
        if (auto breach = check_budgets(config_.budgets, use_now(0))) {
          r.breach = breach;
          {
            std::lock_guard<std::mutex> lock(mu_);
            status_.budget_stops[budget_kind_name(breach->kind)]++;
          }
          say("not tracing: " + breach->why + " (counted as a loss)");
          r.state_since = Clock::now();
          set_state(TracerState::OverBudget);
          break;
        }
        fs::path boot_dir = domain_dir / boot_id();
        std::error_code ec;
        fs::create_directories(boot_dir, ec);
        if (ec) {
          fail_and_back_off("creating " + boot_dir.string() + ": " + ec.message());
          break;
        }
        int n = 0;
        char seq[16];
        do std::snprintf(seq, sizeof seq, "%03d", n++);
        while (fs::exists(boot_dir / seq) && n < 100000);
        r.monitor = r.domain->monitor();
        TraceOptions options = config_.trace;
        options.out_dir = (boot_dir / seq).string();
        options.notice = say;
        std::shared_ptr<LibvirtDomain> domain = r.domain;
        TraceTarget target{domain->description(), r.monitor.get(), "domain " + name_,
                           [domain] { return domain->check_alive(); }, domain->vcpu_threads()};
        target.real_time_vcpus = domain->xml().real_time_vcpus;
        auto session = TraceSession::open(target, options);
        if (!session) {
          fs::remove_all(options.out_dir, ec);  // a session that never began leaves nothing to read
          // A domain that has just started has no kernel page tables or
          // helper yet: wait for it, a second at a time, without counting a
          // failure, for as long as a boot takes.
          bool booting = process_age_seconds(pid) < kBootSeconds ||
                         (r.reboots > 0 && seconds_between(r.rebooted_at, Clock::now()) < kBootSeconds);
          if (r.domain->check_alive() && booting) {
            {
              std::lock_guard<std::mutex> lock(mu_);
              status_.last_error = kWaitingForKernel + session.error().message;
            }
            wait_for(1);
            break;
          }
          fail_and_back_off("starting the trace: " + session.error().message);
          break;
        }
        r.session = std::move(*session);
        r.tables_checked = false;
        r.session_start = r.last_check = Clock::now();
        r.pt_rate.clear();
        {
          std::lock_guard<std::mutex> lock(mu_);
          status_.bundles++;
          status_.bundle = options.out_dir;
          status_.boot_id = boot_id();
          status_.memory_backend = r.session->memory_backend();
          status_.pt_source = r.session->pt_source();
          status_.retry_in_seconds = 0;
          if (starts_with(status_.last_error, kWaitingForKernel)) status_.last_error.clear();  // it booted
        }
        say("tracing into " + options.out_dir + " (" + r.session->describe() + ")");
        set_state(TracerState::Tracing);
        break;
      }

      case TracerState::Tracing: {
        bool going = r.session->step(std::chrono::milliseconds(200));
        auto now = Clock::now();
        auto p = r.session->progress();
        {
          std::lock_guard<std::mutex> lock(mu_);
          status_.ready = r.tables_checked && r.session->ready();
          status_.lost = r.lost_before + p.lost, status_.pt_bytes = r.pt_before + p.pt_bytes;
          status_.text_bytes = r.text_before + p.text_bytes, status_.events = r.events_before + p.events;
          status_.holds = r.holds_before + p.holds;
        }
        if (going && !r.tables_checked && r.session->ready()) {
          // The guest is up. A session opened while it booted walks tables
          // the kernel has since dropped: start the bundle anew.
          r.tables_checked = true;
          if (auto valid = r.session->page_tables_still_valid(); !valid) {
            close_session("the guest finished booting after this bundle began: its page tables changed (" +
                          valid.error().message + "); the next bundle starts from the booted kernel");
            set_state(TracerState::Opening);
            break;
          }
        }
        if (!going) {
          bool failed = r.session->failed();
          std::string why = r.session->end_reason();
          // The channel often closes a moment before libvirt reports the
          // domain gone: give it that moment before calling this a failure,
          // so that the bundle says why (shut off, crashed, migrated away).
          for (int i = 0; i < 12; ++i) {
            auto alive = r.domain->check_alive();
            if (!alive && alive.error().code == ErrorCode::Io) break;  // libvirtd, not the domain: retry
            if (!alive) {
              r.session->explain_end(alive.error().message);
              return end_tracer(alive.error().message);
            }
            if (!stop_requested().empty()) break;
            wait_for(0.25);
          }
          close_session(why);
          if (seconds_between(r.session_start, now) > 60) r.backoff.reset();
          // The domain runs on: the helper went away (a reboot in place, a
          // restart of ktguest) or the trace failed. Try again.
          fail_and_back_off(std::string(failed ? "the trace failed: " : "the trace ended: ") + why);
          break;
        }
        if (std::string boot = take_new_boot(); !boot.empty()) {
          close_session("the guest rebooted: " + boot);
          r.reboots++;
          r.rebooted_at = Clock::now();
          set_state(TracerState::Opening);
          break;
        }
        if (seconds_between(r.last_check, now) < 1) break;
        r.last_check = now;
        r.pt_rate.add(now, p.pt_bytes);
        BudgetUse use = use_now(r.pt_rate.rate());
        {
          std::lock_guard<std::mutex> lock(mu_);
          status_.disk_bytes = use.domain_disk_bytes;
        }
        if (auto breach = check_budgets(config_.budgets, use)) {
          close_session("budget: " + breach->why);
          {
            std::lock_guard<std::mutex> lock(mu_);
            status_.budget_stops[budget_kind_name(breach->kind)]++;
          }
          say("stopped: " + breach->why + " (counted as a loss)");
          r.breach = breach;
          r.state_since = now;
          set_state(TracerState::OverBudget);
          break;
        }
        const Rotation& rot = config_.rotation;
        bool by_size = rot.bytes && p.pt_bytes + p.text_bytes >= rot.bytes;
        bool by_time = rot.seconds > 0 && p.seconds >= rot.seconds;
        if (by_size || by_time) {
          close_session(by_size ? "rotation: size" : "rotation: time");
          set_state(TracerState::Opening);
        }
        break;
      }

      case TracerState::Backoff: {
        auto now = Clock::now();
        {
          std::lock_guard<std::mutex> lock(mu_);
          status_.retry_in_seconds = std::max(0.0, seconds_between(now, r.retry_at));
        }
        bool retry = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          retry = std::exchange(retry_now_, false);
        }
        if (std::string boot = take_new_boot(); !boot.empty()) {
          r.reboots++, r.rebooted_at = now;  // the next bundle belongs to the new boot
          retry = true;
        }
        if (now >= r.retry_at || retry) {
          set_state(TracerState::Opening);
          break;
        }
        double wait = std::min(1.0, seconds_between(now, r.retry_at));
        wait_for(wait);
        untraced_since(now);
        break;
      }

      case TracerState::OverBudget: {
        auto since = Clock::now();
        wait_for(1);
        untraced_since(since);
        if (r.domain && !r.domain->check_alive()) return end_tracer("the domain is gone (over budget)");
        if (std::string boot = take_new_boot(); !boot.empty()) r.reboots++, r.rebooted_at = Clock::now();
        if (budget_allows_resume(config_.budgets, *r.breach, use_now(0), seconds_between(r.state_since, Clock::now()))) {
          say("budget allows tracing again");
          set_state(TracerState::Opening);
        }
        break;
      }

      case TracerState::Ended:
        return;
    }
  }
}

}  // namespace kt
