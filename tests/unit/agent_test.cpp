// The agent's pure parts: which domains opt in, budgets, back-off, sizes,
// boot ids, the status request parser and the three status renderings,
// and the status server end to end over a real unix socket.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "kthost/agent/agent_status.h"
#include "kthost/agent/backoff.h"
#include "kthost/agent/budget.h"
#include "kthost/agent/domain_tracer.h"
#include "kthost/agent/opt_in.h"
#include "kthost/agent/status_server.h"
#include "kthost/libvirt/domain_xml.h"
#include "kthost/libvirt/libvirt_host.h"
#include "kthost_shared.h"

namespace kt {
namespace {

std::string domain_xml(const std::string& name, bool channel, const std::string& metadata = "") {
  std::string xml = "<domain type='qemu'><name>" + name + "</name><memory unit='MiB'>256</memory><vcpu>1</vcpu>";
  if (!metadata.empty()) xml += "<metadata>" + metadata + "</metadata>";
  xml += "<devices>";
  if (channel)
    xml += "<channel type='unix'><source mode='bind' path='/run/kthost/" + name +
           "/kthost0.sock'/><target type='virtio' name='" KTHOST_PORT_SIDEBAND "'/></channel>";
  return xml + "</devices></domain>";
}

DomainXml parsed(const std::string& xml) {
  auto d = DomainXml::parse(xml);
  EXPECT_TRUE(d) << d.error().message;
  return d ? *d : DomainXml{};
}

TEST(AgentOptIn, NeedsTheChannel) {
  auto d = decide_opt_in(parsed(domain_xml("vm1", false)), {});
  EXPECT_FALSE(d.trace);
  EXPECT_NE(d.why.find(KTHOST_PORT_SIDEBAND), std::string::npos) << d.why;
  EXPECT_TRUE(decide_opt_in(parsed(domain_xml("vm1", true)), {}).trace);
}

TEST(AgentOptIn, MatchesTheNameOrTheMetadataTag) {
  std::vector<std::string> match = {"ci-*", "farm"};
  EXPECT_TRUE(decide_opt_in(parsed(domain_xml("ci-42", true)), match).trace);
  EXPECT_FALSE(decide_opt_in(parsed(domain_xml("web-1", true)), match).trace);
  std::string tagged = "<kthost:trace xmlns:kthost='urn:kthost:agent:1' enabled='yes' tag='farm'/>";
  auto xml = parsed(domain_xml("web-1", true, tagged));
  EXPECT_TRUE(xml.has_agent_metadata);
  EXPECT_EQ(xml.agent_tag, "farm");
  auto d = decide_opt_in(xml, match);
  EXPECT_TRUE(d.trace);
  EXPECT_NE(d.why.find("metadata tag"), std::string::npos) << d.why;
}

TEST(AgentOptIn, MetadataCanOptOutAndOtherNamespacesAreIgnored) {
  std::string off = "<kthost:trace xmlns:kthost='urn:kthost:agent:1' enabled='no'/>";
  EXPECT_FALSE(decide_opt_in(parsed(domain_xml("ci-1", true, off)), {"ci-*"}).trace);
  std::string other = "<x:trace xmlns:x='urn:someone:else' enabled='no' tag='farm'/>";
  auto xml = parsed(domain_xml("web-1", true, other));
  EXPECT_FALSE(xml.has_agent_metadata);
  EXPECT_FALSE(decide_opt_in(xml, {"farm"}).trace);
  EXPECT_TRUE(decide_opt_in(xml, {}).trace);
}

// Whether a vCPU thread found under SCHED_FIFO is the domain's own choice.
TEST(DomainXmlParse, RealTimeVcpusComeFromCputuneVcpusched) {
  EXPECT_FALSE(parsed(domain_xml("vm1", true)).real_time_vcpus);
  std::string xml = domain_xml("vm1", true);
  xml.insert(xml.find("<devices>"), "<cputune><vcpusched vcpus='0' scheduler='fifo' priority='1'/></cputune>");
  EXPECT_TRUE(parsed(xml).real_time_vcpus);
}

TEST(AgentBudget, EachLimitIsNamedAndResumesOnlyWhenAllowed) {
  Budgets b;
  b.total_disk_bytes = 1000, b.domain_disk_bytes = 500, b.pt_bytes_per_second = 100, b.memory_bytes = 1 << 20;
  b.pt_cooldown_seconds = 30;
  EXPECT_FALSE(check_budgets(b, {10, 10, 10, 10}));
  auto disk = check_budgets(b, {1000, 10, 10, 10});
  ASSERT_TRUE(disk);
  EXPECT_EQ(disk->kind, BudgetKind::TotalDisk);
  EXPECT_EQ(check_budgets(b, {10, 500, 10, 10})->kind, BudgetKind::DomainDisk);
  EXPECT_EQ(check_budgets(b, {10, 10, 1 << 20, 10})->kind, BudgetKind::Memory);
  auto rate = check_budgets(b, {10, 10, 10, 150});
  ASSERT_TRUE(rate);
  EXPECT_EQ(rate->kind, BudgetKind::PtRate);
  EXPECT_NE(rate->why.find("/s"), std::string::npos) << rate->why;
  EXPECT_FALSE(budget_allows_resume(b, *rate, {}, 29));
  EXPECT_TRUE(budget_allows_resume(b, *rate, {}, 30));
  EXPECT_FALSE(budget_allows_resume(b, *disk, {950, 0, 0, 0}, 1000));
  EXPECT_TRUE(budget_allows_resume(b, *disk, {800, 0, 0, 0}, 0));
  EXPECT_FALSE(check_budgets(Budgets{}, {UINT64_MAX, UINT64_MAX, UINT64_MAX, 1e18}));  // 0: no limit
}

TEST(AgentBackoff, DoublesToTheCeilingAndResets) {
  Backoff b(10, 1);
  EXPECT_EQ(b.next(), 1);
  EXPECT_EQ(b.next(), 2);
  EXPECT_EQ(b.next(), 4);
  EXPECT_EQ(b.next(), 8);
  EXPECT_EQ(b.next(), 10);
  EXPECT_EQ(b.next(), 10);
  b.reset();
  EXPECT_EQ(b.next(), 1);
}

TEST(AgentBootId, IsTheProcessStartTimeAndPid) {
  auto id = boot_id_of_process(::getpid());
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_TRUE(std::regex_match(*id, std::regex(R"(\d{8}T\d{6}Z-pid\d+)"))) << *id;
  EXPECT_EQ(*boot_id_of_process(::getpid()), *id);  // stable: an agent restart finds the same boot
  EXPECT_FALSE(boot_id_of_process(0x7ffffff0));
}

TEST(AgentStatusRequest, ParsesOnlyWhatIsServed) {
  EXPECT_EQ(*parse_status_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), StatusPath::Metrics);
  EXPECT_EQ(*parse_status_request("GET /status.json HTTP/1.0\n\n"), StatusPath::Json);
  EXPECT_EQ(*parse_status_request("GET /status?x=1 HTTP/1.0\r\n"), StatusPath::Text);
  for (const char* bad : {"POST /metrics HTTP/1.1\r\n", "GET /etc/passwd HTTP/1.1\r\n", "GET /metrics\r\n",
                          "GET /metrics SPDY/3\r\n", "GET /metrics HTTP/1.1", ""}) {
    auto r = parse_status_request(bad);
    EXPECT_FALSE(r) << bad;
  }
  EXPECT_FALSE(parse_status_request(std::string(5000, 'A')));
}

AgentStatus sample_status() {
  AgentStatus s;
  s.uri = "qemu:///system";
  s.libvirt_connected = true;
  s.uptime_seconds = 12;
  s.total_disk_bytes = 3 << 20;
  DomainStatus a;
  a.name = "vm\"1\\\n";
  a.state = "tracing";
  a.ready = true;
  a.bundles = 2, a.holds = 7, a.lost = 1, a.pt_bytes = 1000, a.disk_bytes = 2000;
  a.budget_stops["pt_rate"] = 1;
  DomainStatus b;
  b.name = "vm2";
  b.state = "ended";
  b.bundles = 1, b.holds = 3, b.disk_bytes = 500;
  DomainStatus b2 = b;
  b2.state = "tracing";
  b2.holds = 4, b2.disk_bytes = 900;
  s.domains = {a, b, b2};
  s.skipped = {{"web", "no sideband channel"}};
  return s;
}

TEST(AgentStatusRender, PrometheusTextIsWellFormedAndSumsRestarts) {
  std::string text = sample_status().to_prometheus();
  // Every line is a comment or "name{labels} value" with a known family.
  std::regex sample(R"re(^([a-z_]+)(\{([a-z_]+="([^"\\]|\\.)*",?)+\})? -?[0-9.e+]+$)re");
  std::set<std::string> typed;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    EXPECT_TRUE(typed.count(m[1].str())) << "no TYPE before " << line;
  }
  EXPECT_NE(text.find("kthost_domain_holds_total{domain=\"vm2\"} 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kthost_domain_disk_bytes{domain=\"vm2\"} 900\n"), std::string::npos) << text;
  EXPECT_NE(text.find("domain=\"vm\\\"1\\\\\\n\""), std::string::npos) << text;
  EXPECT_NE(text.find("kthost_domain_budget_stops_total{domain=\"vm\\\"1\\\\\\n\",budget=\"pt_rate\"} 1"), std::string::npos);
}

TEST(AgentStatusRender, JsonAndTextNameEveryDomain) {
  auto s = sample_status();
  auto j = s.to_json();
  ASSERT_EQ(j["domains"].size(), 3u);
  EXPECT_EQ(j["domains"][0]["budget_stops"]["pt_rate"], 1);
  EXPECT_EQ(j["skipped"][0]["why"], "no sideband channel");
  std::string text = s.to_text();
  EXPECT_NE(text.find("vm2"), std::string::npos);
  EXPECT_NE(text.find("stopped by the pt_rate budget 1 time(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("not traced: web: no sideband channel"), std::string::npos);
  EXPECT_EQ(text.find('\x0a' + std::string("vm\"1\\\n")), std::string::npos);  // names are sanitized
}

TEST(AgentStatusServer, AnswersOverTheUnixSocket) {
  std::string path = "/tmp/kthost-agent-test-" + std::to_string(::getpid()) + ".sock";
  int calls = 0;
  auto server = StatusServer::start(path, "", [&] {
    ++calls;
    return sample_status();
  });
  ASSERT_TRUE(server) << server.error().message;
  auto json = query_agent(path, "/status.json");
  ASSERT_TRUE(json) << json.error().message;
  EXPECT_EQ(nlohmann::json::parse(*json)["domains"][2]["name"], "vm2");
  auto metrics = query_agent(path, "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->find("kthost_agent_up_seconds 12"), std::string::npos);
  auto bad = query_agent(path, "/nope");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("400"), std::string::npos) << bad.error().message;
  EXPECT_EQ(calls, 2);
  server->reset();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);  // removed
  EXPECT_FALSE(query_agent(path, "/status"));
}

TEST(AgentStatusServer, MetricsPortIsLoopbackOnly) {
  auto s = StatusServer::start("/tmp/kthost-agent-test-tcp.sock", "0.0.0.0:19999", [] { return AgentStatus{}; });
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("loopback"), std::string::npos);
}

}  // namespace
}  // namespace kt

namespace kt {
namespace {

TEST(AgentBudget, DirectoryBytesCountsEveryFileBelow) {
  std::string dir = "/tmp/kthost-agent-du-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/a/b");
  { std::ofstream(dir + "/x") << std::string(1000, 'x'); }
  { std::ofstream(dir + "/a/b/y") << std::string(234, 'y'); }
  EXPECT_EQ(directory_bytes(dir), 1234u);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(directory_bytes(dir), 0u);
}

}  // namespace
}  // namespace kt

#include <libvirt/libvirt.h>

namespace kt {
namespace {

// libvirt's codes, from its public header, against the kinds the agent acts on.
TEST(AgentEvents, LibvirtLifecycleCodesMapToWhatTheAgentDoes) {
  EXPECT_EQ(lifecycle_from_codes(VIR_DOMAIN_EVENT_STARTED, VIR_DOMAIN_EVENT_STARTED_BOOTED).kind, LifecycleKind::Started);
  auto migrated = lifecycle_from_codes(VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_MIGRATED);
  EXPECT_EQ(migrated.kind, LifecycleKind::MigratedAway);
  EXPECT_EQ(migrated.detail, "migrated away");
  EXPECT_EQ(lifecycle_from_codes(VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_CRASHED).kind, LifecycleKind::Crashed);
  EXPECT_EQ(lifecycle_from_codes(VIR_DOMAIN_EVENT_CRASHED, VIR_DOMAIN_EVENT_CRASHED_PANICKED).kind, LifecycleKind::Crashed);
  auto destroyed = lifecycle_from_codes(VIR_DOMAIN_EVENT_STOPPED, VIR_DOMAIN_EVENT_STOPPED_DESTROYED);
  EXPECT_EQ(destroyed.kind, LifecycleKind::Stopped);
  EXPECT_EQ(destroyed.detail, "destroyed");
  EXPECT_EQ(lifecycle_from_codes(VIR_DOMAIN_EVENT_SUSPENDED, 0).kind, LifecycleKind::Other);
  EXPECT_EQ(lifecycle_from_codes(12345, 6).kind, LifecycleKind::Other);
}

}  // namespace
}  // namespace kt
