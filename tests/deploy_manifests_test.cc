// The deployment files in deploy/ hold together: the Kubernetes manifests
// (rendered offline by `kubectl kustomize` when kubectl is installed, else
// read file by file), the Compose file and the Dockerfile are parsed and
// checked for the invariants Trainyard relies on, and every command line
// they give yard-server or yard-worker is accepted by the real binaries.
// `kubectl apply --dry-run=client` needs an API server even in client mode,
// so it cannot run here; Docker needs an engine: neither is attempted.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/harness.h"
#include "tests/metrics_scrape.h"

namespace trainyard::itest {
namespace {

std::string DeployDir() { return SourceDir() + "/deploy"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const YAML::Node& n : list) out.push_back(n.as<std::string>());
  return out;
}

// The value of --name=VALUE in args; "" when absent.
std::string Flag(const std::vector<std::string>& args,
                 const std::string& name) {
  for (const std::string& a : args) {
    if (absl::StartsWith(a, name + "=")) return a.substr(name.size() + 1);
  }
  return "";
}

// args[0] is the program; the binary must accept the rest. `--help` goes
// last: both parsers still check every flag before it.
void ExpectBinaryAccepts(TestDir& dir, const std::vector<std::string>& args,
                         const std::string& where) {
  ASSERT_FALSE(args.empty()) << where;
  std::vector<std::string> argv = {BinPath(args[0])};
  for (size_t i = 1; i < args.size(); ++i) {
    // Kubernetes expands $(NODE_NAME) and $(POD_IP); give the parser real
    // values.
    argv.push_back(absl::StrReplaceAll(
        args[i], {{"$(NODE_NAME)", "node-1"}, {"$(POD_IP)", "10.1.2.3"}}));
  }
  argv.push_back("--help");
  CommandResult r =
      RunCommand(argv, dir.LogPrefix("flags"), Scaled(absl::Seconds(20)));
  EXPECT_EQ(r.exit_code(), 0) << where << ": " << r.DebugString();
}

class DeployManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = TestDir::Create(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(d.ok()) << d.status();
    dir_ = *std::move(d);
  }
  std::unique_ptr<TestDir> dir_;
};

// Every Kubernetes object, by "Kind/name".
std::map<std::string, YAML::Node> LoadKubernetes(TestDir& dir) {
  std::string text;
  if (OnPath("kubectl")) {
    CommandResult r = RunCommand(
        {"/usr/bin/env", "kubectl", "kustomize", DeployDir() + "/k8s"},
        dir.LogPrefix("kustomize"), Scaled(absl::Seconds(60)));
    EXPECT_EQ(r.exit_code(), 0) << r.DebugString();
    text = r.out;
  } else {
    YAML::Node k = YAML::LoadFile(DeployDir() + "/k8s/kustomization.yaml");
    for (const std::string& f : Strings(k["resources"])) {
      text += ReadAll(DeployDir() + "/k8s/" + f) + "\n---\n";
    }
  }
  std::map<std::string, YAML::Node> objects;
  for (const YAML::Node& doc : YAML::LoadAll(text)) {
    if (!doc.IsMap()) continue;
    const std::string key = doc["kind"].as<std::string>() + "/" +
                            doc["metadata"]["name"].as<std::string>();
    EXPECT_FALSE(objects.contains(key)) << "duplicate " << key;
    objects[key] = doc;
  }
  return objects;
}

YAML::Node Container(const YAML::Node& pod_spec, const std::string& name) {
  for (const YAML::Node& c : pod_spec["containers"]) {
    if (c["name"].as<std::string>() == name) return c;
  }
  ADD_FAILURE() << "no container " << name;
  return YAML::Node();
}

std::string MountPath(const YAML::Node& container, const std::string& volume) {
  for (const YAML::Node& m : container["volumeMounts"]) {
    if (m["name"].as<std::string>() == volume) {
      return m["mountPath"].as<std::string>();
    }
  }
  return "";
}

bool SelectorMatches(const YAML::Node& selector, const YAML::Node& labels) {
  for (const auto& kv : selector) {
    if (!labels[kv.first.as<std::string>()] ||
        labels[kv.first.as<std::string>()].as<std::string>() !=
            kv.second.as<std::string>()) {
      return false;
    }
  }
  return selector.size() > 0;
}

std::string Port(const std::string& host_port) {
  return host_port.substr(host_port.rfind(':') + 1);
}

TEST_F(DeployManifestsTest, KubernetesManifestsHoldTogether) {
  auto objects = LoadKubernetes(*dir_);
  ASSERT_TRUE(objects.contains("StatefulSet/yard-server"));
  ASSERT_TRUE(objects.contains("DaemonSet/yard-worker"));
  ASSERT_TRUE(objects.contains("Service/yard-server"));
  ASSERT_TRUE(objects.contains("PersistentVolumeClaim/yard-checkpoints"));
  // kustomize puts every namespaced object into the trainyard namespace.
  for (const auto& [key, o] : objects) {
    if (!OnPath("kubectl")) break;
    if (o["kind"].as<std::string>() == "Namespace") continue;
    if (absl::StartsWith(o["kind"].as<std::string>(), "Cluster")) continue;
    EXPECT_EQ(o["metadata"]["namespace"].as<std::string>(""), "trainyard")
        << key;
  }

  // Server: one replica, its store on a claim, probes on the health port.
  const YAML::Node sts = objects["StatefulSet/yard-server"];
  EXPECT_EQ(sts["spec"]["replicas"].as<int>(), 1);
  EXPECT_TRUE(objects.contains("Service/" +
                               sts["spec"]["serviceName"].as<std::string>()));
  const YAML::Node pod = sts["spec"]["template"]["spec"];
  EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>());
  const YAML::Node server = Container(pod, "yard-server");
  const auto server_args = Strings(server["args"]);
  ExpectBinaryAccepts(*dir_, server_args, "StatefulSet/yard-server");
  bool state_claim = false;
  for (const YAML::Node& t : sts["spec"]["volumeClaimTemplates"]) {
    if (t["metadata"]["name"].as<std::string>() != "state") continue;
    state_claim = true;
    EXPECT_EQ(Strings(t["spec"]["accessModes"]),
              std::vector<std::string>{"ReadWriteOnce"});
  }
  EXPECT_TRUE(state_claim);
  EXPECT_EQ(MountPath(server, "state"), Flag(server_args, "--state-dir"));
  const std::string health = Port(Flag(server_args, "--health-listen"));
  ASSERT_FALSE(health.empty()) << "the server needs --health-listen";
  for (const char* probe : {"livenessProbe", "readinessProbe"}) {
    ASSERT_TRUE(server[probe]["grpc"]) << probe << " must be a gRPC probe";
    EXPECT_EQ(server[probe]["grpc"]["port"].as<std::string>(), health) << probe;
  }
  // The API over TLS with mTLS for workers; /metrics stays on loopback
  // behind the authenticating proxy.
  const std::string listen = Flag(server_args, "--listen");
  EXPECT_FALSE(Flag(server_args, "--tls-cert").empty());
  EXPECT_FALSE(Flag(server_args, "--tls-key").empty());
  EXPECT_FALSE(Flag(server_args, "--tls-client-ca").empty());
  EXPECT_TRUE(absl::StartsWith(Flag(server_args, "--tls-cert"),
                               MountPath(server, "tls")));
  const std::string server_metrics = Flag(server_args, "--metrics-listen");
  EXPECT_TRUE(absl::StartsWith(server_metrics, "127.0.0.1:"));
  const auto proxy_args = Strings(Container(pod, "metrics")["args"]);
  EXPECT_NE(absl::StrJoin(proxy_args, " ").find(server_metrics),
            std::string::npos);

  // Checkpoints: one ReadWriteMany claim, mounted where the server says.
  EXPECT_EQ(Strings(objects["PersistentVolumeClaim/yard-checkpoints"]["spec"]
                           ["accessModes"]),
            std::vector<std::string>{"ReadWriteMany"});
  const std::string ckpt = Flag(server_args, "--checkpoint-root");
  EXPECT_EQ(MountPath(server, "checkpoints"), ckpt);

  // Workers: GPUs from the device plugin, the NVIDIA taint tolerated, the
  // same checkpoint path, the server reached over TLS.
  const YAML::Node ds = objects["DaemonSet/yard-worker"];
  const YAML::Node wpod = ds["spec"]["template"]["spec"];
  const YAML::Node worker = Container(wpod, "yard-worker");
  const auto worker_args = Strings(worker["args"]);
  ExpectBinaryAccepts(*dir_, worker_args, "DaemonSet/yard-worker");
  EXPECT_GE(worker["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  bool tolerated = false;
  for (const YAML::Node& t : wpod["tolerations"]) {
    tolerated |= t["key"].as<std::string>("") == "nvidia.com/gpu";
  }
  EXPECT_TRUE(tolerated);
  EXPECT_EQ(MountPath(worker, "checkpoints"), ckpt);
  for (const YAML::Node& v : wpod["volumes"]) {
    if (v["name"].as<std::string>() == "checkpoints") {
      EXPECT_EQ(v["persistentVolumeClaim"]["claimName"].as<std::string>(),
                "yard-checkpoints");
    }
  }
  // The worker reaches the Service's TLS port with its certificate and
  // join token.
  EXPECT_TRUE(absl::StartsWith(Flag(worker_args, "--server"), "yard-server."));
  EXPECT_TRUE(absl::EndsWith(Flag(worker_args, "--server"),
                             ":" + Port(listen)));
  EXPECT_TRUE(absl::StartsWith(Flag(worker_args, "--tls-cert"),
                               MountPath(worker, "tls")));
  EXPECT_TRUE(absl::StartsWith(Flag(worker_args, "--token-file"),
                               MountPath(worker, "join")));
  EXPECT_TRUE(
      absl::StartsWith(Flag(worker_args, "--metrics-listen"), "127.0.0.1:"));
  // Rank 0 of a job spread over nodes listens where the other nodes reach
  // it: its pod's IP, not the loopback default.
  EXPECT_EQ(Flag(worker_args, "--rank-address"), "$(POD_IP)");
  bool pod_ip = false;
  for (const YAML::Node& e : worker["env"]) {
    pod_ip |= e["name"].as<std::string>() == "POD_IP" &&
              e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>("") ==
                  "status.podIP";
  }
  EXPECT_TRUE(pod_ip) << "POD_IP must come from status.podIP";

  // Services select their pods and name ports the pods have; each
  // ServiceMonitor selects a Service port that exists.
  std::map<std::string, YAML::Node> pod_templates = {
      {"yard-server", sts["spec"]["template"]},
      {"yard-worker", ds["spec"]["template"]}};
  int monitors = 0;
  for (const auto& [key, o] : objects) {
    const std::string kind = o["kind"].as<std::string>();
    if (kind == "Service") {
      bool selected = false;
      for (const auto& [name, tmpl] : pod_templates) {
        if (!SelectorMatches(o["spec"]["selector"], tmpl["metadata"]["labels"]))
          continue;
        selected = true;
        std::set<std::string> container_ports;
        for (const YAML::Node& c : tmpl["spec"]["containers"]) {
          for (const YAML::Node& p : c["ports"]) {
            container_ports.insert(p["name"].as<std::string>());
          }
        }
        for (const YAML::Node& p : o["spec"]["ports"]) {
          const std::string target =
              p["targetPort"].as<std::string>(p["name"].as<std::string>());
          EXPECT_TRUE(container_ports.contains(target)) << key << " " << target;
        }
      }
      EXPECT_TRUE(selected) << key << " selects no Trainyard pod";
    }
    if (kind == "ServiceMonitor") {
      ++monitors;
      bool found = false;
      for (const auto& [skey, s] : objects) {
        if (s["kind"].as<std::string>() != "Service" ||
            !SelectorMatches(o["spec"]["selector"]["matchLabels"],
                             s["metadata"]["labels"])) {
          continue;
        }
        for (const YAML::Node& p : s["spec"]["ports"]) {
          found |= p["name"].as<std::string>() ==
                   o["spec"]["endpoints"][0]["port"].as<std::string>();
        }
      }
      EXPECT_TRUE(found) << key << " selects no Service port";
    }
  }
  EXPECT_EQ(monitors, 2);
}

TEST_F(DeployManifestsTest, ComposeFileHoldsTogether) {
  const YAML::Node compose =
      YAML::LoadFile(DeployDir() + "/docker-compose.yml");
  const YAML::Node services = compose["services"];
  for (const char* s :
       {"yard-server", "yard-worker", "prometheus", "grafana"}) {
    ASSERT_TRUE(services[s]) << "no service " << s;
  }
  const auto server_cmd = Strings(services["yard-server"]["command"]);
  const auto worker_cmd = Strings(services["yard-worker"]["command"]);
  ExpectBinaryAccepts(*dir_, server_cmd, "compose yard-server");
  ExpectBinaryAccepts(*dir_, worker_cmd, "compose yard-worker");
  // Loopback-only daemons: everyone shares the server's network namespace.
  for (const char* s : {"yard-worker", "prometheus", "grafana"}) {
    EXPECT_EQ(services[s]["network_mode"].as<std::string>(""),
              "service:yard-server")
        << s;
  }
  EXPECT_EQ(Flag(worker_cmd, "--server"), Flag(server_cmd, "--listen"));
  // One GPU reserved for the worker.
  const YAML::Node devices =
      services["yard-worker"]["deploy"]["resources"]["reservations"]["devices"];
  ASSERT_TRUE(devices && devices.size() == 1);
  EXPECT_EQ(Strings(devices[0]["capabilities"]),
            std::vector<std::string>{"gpu"});
  // The worker mounts the checkpoints where the server puts them.
  const std::string ckpt = Flag(server_cmd, "--checkpoint-root");
  bool shared = false;
  for (const std::string& v : Strings(services["yard-worker"]["volumes"])) {
    shared |= v == "checkpoints:" + ckpt;
  }
  EXPECT_TRUE(shared) << "worker lacks checkpoints:" << ckpt;
  // The worker sees its join token, copied by join-token, and never the
  // state volume (the admin token, the stores).
  const std::string state = Flag(server_cmd, "--state-dir");
  for (const std::string& v : Strings(services["yard-worker"]["volumes"])) {
    EXPECT_FALSE(absl::StartsWith(v, "state:")) << "the worker mounts " << v;
  }
  // A fresh named volume takes the owner of the image's directory at its
  // mount point: each must be one the image makes (and gives its
  // unprivileged user), or the daemons could not write it.
  const std::string dockerfile = ReadAll(DeployDir() + "/Dockerfile");
  const std::string made = dockerfile.substr(dockerfile.find("mkdir -p"));
  for (const char* s : {"yard-server", "yard-worker", "join-token"}) {
    for (const std::string& v : Strings(services[s]["volumes"])) {
      if (absl::StartsWith(v, "./")) continue;  // a bind mount
      std::string target = v.substr(v.find(':') + 1);
      target = target.substr(0, target.find(':'));
      EXPECT_TRUE(
          absl::StrContains(made.substr(0, made.find("USER")), target + " ") ||
          absl::StrContains(made.substr(0, made.find("USER")), target + "\\"))
          << s << " mounts a volume at " << target
          << ", which the image does not make";
    }
  }
  const std::string copy = Strings(services["join-token"]["command"]).at(0);
  EXPECT_TRUE(absl::StrContains(
      copy, state + "/worker.token " + Flag(worker_cmd, "--token-file")))
      << copy;
  // Prometheus scrapes what the daemons listen on; bind mounts exist.
  const std::string prom_cfg =
      ReadAll(DeployDir() + "/prometheus/prometheus.yml");
  EXPECT_NE(prom_cfg.find(Flag(server_cmd, "--metrics-listen")),
            std::string::npos);
  EXPECT_NE(prom_cfg.find(Flag(worker_cmd, "--metrics-listen")),
            std::string::npos);
  for (const char* s : {"prometheus", "grafana"}) {
    for (const std::string& v : Strings(services[s]["volumes"])) {
      if (!absl::StartsWith(v, "./")) continue;
      const std::string host = v.substr(0, v.find(':'));
      EXPECT_TRUE(std::filesystem::exists(DeployDir() + "/" + host))
          << s << " mounts missing " << host;
    }
  }
  // Grafana's dashboard provider reads the directory compose mounts.
  const YAML::Node provider = YAML::LoadFile(
      DeployDir() + "/grafana/provisioning/dashboards/trainyard.yml");
  const std::string path =
      provider["providers"][0]["options"]["path"].as<std::string>();
  bool mounted = false;
  for (const std::string& v : Strings(services["grafana"]["volumes"])) {
    mounted |= absl::StrContains(v, "./grafana/dashboards:" + path);
  }
  EXPECT_TRUE(mounted) << "grafana does not mount dashboards at " << path;
}

TEST_F(DeployManifestsTest, DockerfileIsMultiStageAndUnprivileged) {
  const std::string text = ReadAll(DeployDir() + "/Dockerfile");
  std::vector<std::string> from, user;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "FROM ")) from.emplace_back(line);
    if (absl::StartsWith(line, "USER ")) user.emplace_back(line.substr(5));
  }
  ASSERT_EQ(from.size(), 2u) << text;
  EXPECT_TRUE(absl::StrContains(from[0], "nvidia/cuda:") &&
              absl::StrContains(from[0], "-devel-"))
      << from[0];
  EXPECT_TRUE(absl::StrContains(from[1], "nvidia/cuda:") &&
              absl::StrContains(from[1], "-runtime-"))
      << from[1];
  EXPECT_TRUE(absl::StrContains(text, "COPY --from=build"));
  ASSERT_FALSE(user.empty());
  EXPECT_NE(user.back(), "root");
  EXPECT_FALSE(absl::StartsWith(user.back(), "0"));
}

// The build context holds tracked sources only: whatever .gitignore keeps
// out of the repository (build trees such as build-fuzz/, virtual
// environments, the GPU kit) deploy/Dockerfile.dockerignore keeps out of
// `COPY . .`, where it would bloat the context or leak into the build.
TEST_F(DeployManifestsTest, DockerIgnoreCoversGitIgnore) {
  const std::string gitignore = ReadAll(SourceDir() + "/.gitignore");
  const std::string dockerignore =
      ReadAll(DeployDir() + "/Dockerfile.dockerignore");
  std::vector<std::string> ignored;
  for (absl::string_view line : absl::StrSplit(dockerignore, '\n')) {
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    ignored.emplace_back(line);
  }
  int checked = 0;
  for (absl::string_view line : absl::StrSplit(gitignore, '\n')) {
    std::string entry(absl::StripAsciiWhitespace(line));
    if (entry.empty() || absl::StartsWith(entry, "#") ||
        absl::StartsWith(entry, "!")) {
      continue;
    }
    ++checked;
    // `/build/` (root) is `build` to Docker; `__pycache__/` (any depth)
    // is `**/__pycache__`.
    const bool rooted = absl::StartsWith(entry, "/");
    std::string name = std::string(absl::StripPrefix(entry, "/"));
    name = std::string(absl::StripSuffix(name, "/"));
    const std::string want = rooted ? name : "**/" + name;
    EXPECT_TRUE(std::find(ignored.begin(), ignored.end(), want) !=
                ignored.end())
        << ".gitignore ignores " << entry
        << " but deploy/Dockerfile.dockerignore has no line " << want;
  }
  EXPECT_GE(checked, 3) << "found too few entries in .gitignore";
}

// The image builds with the same libraries as `make`: every -dev package the
// deps script installs must be installed in the Dockerfile's build stage too
// (otherwise find_package fails there, which no test here could notice).
TEST_F(DeployManifestsTest, DockerfileInstallsEveryDevPackageOfTheDepsScript) {
  const std::string deps = ReadAll(SourceDir() + "/scripts/install-deps.sh");
  const std::string dockerfile = ReadAll(DeployDir() + "/Dockerfile");
  int checked = 0;
  for (absl::string_view word : absl::StrSplit(
           deps, absl::ByAnyChar(" \n\t()"), absl::SkipEmpty())) {
    if (!absl::EndsWith(word, "-dev")) continue;
    ++checked;
    EXPECT_TRUE(absl::StrContains(dockerfile, absl::StrCat(" ", word, " ")) ||
                absl::StrContains(dockerfile, absl::StrCat(" ", word, "\n")))
        << word << " is installed by scripts/install-deps.sh but not by "
        << "deploy/Dockerfile";
  }
  EXPECT_GE(checked, 8) << "found too few -dev packages in install-deps.sh";
}

}  // namespace
}  // namespace trainyard::itest
