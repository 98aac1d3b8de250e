#include "client/client_config.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_credentials.h"
#include "common/status_macros.h"

namespace trainyard::client {
namespace {

bool Set(const char* v) { return v != nullptr && *v != '\0'; }

const std::string* Find(const std::map<std::string, std::string>& m,
                        const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

// The config file's path, and whether the user named it (so that it must
// exist).
std::pair<std::string, bool> ConfigPath(const CliArgs& args,
                                        const ClientEnv& env) {
  if (!args.config_path.empty()) return {args.config_path, true};
  if (Set(env.config)) return {env.config, true};
  if (Set(env.xdg_config_home)) {
    return {absl::StrCat(env.xdg_config_home, "/trainyard/config"), false};
  }
  if (Set(env.home)) {
    return {absl::StrCat(env.home, "/.config/trainyard/config"), false};
  }
  return {"", false};
}

}  // namespace

ClientEnv ClientEnv::FromProcess() {
  ClientEnv env;
  env.token = std::getenv("YARD_TOKEN");
  env.config = std::getenv("YARD_CONFIG");
  env.tls_ca = std::getenv("YARD_TLS_CA");
  env.home = std::getenv("HOME");
  env.xdg_config_home = std::getenv("XDG_CONFIG_HOME");
  return env;
}

absl::StatusOr<std::map<std::string, std::string>> ParseClientConfig(
    const std::string& text, const std::string& path) {
  static const char* const kKeys[] = {"server", "token", "token_file",
                                      "tls_ca", "tls_server_name"};
  std::map<std::string, std::string> out;
  int line_number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    absl::StripAsciiWhitespace(&line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_number, ": expected \"key = value\""));
    }
    std::string key = line.substr(0, eq);
    std::string value = line.substr(eq + 1);
    absl::StripAsciiWhitespace(&key);
    absl::StripAsciiWhitespace(&value);
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_number, ": unknown key \"", key,
          "\" (server, token, token_file, tls_ca, tls_server_name)"));
    }
    out[key] = value;
  }
  return out;
}

absl::StatusOr<ClientOptions> ResolveClientOptions(const CliArgs& args,
                                                   const ClientEnv& env) {
  std::map<std::string, std::string> config;
  const auto [path, named] = ConfigPath(args, env);
  std::error_code ec;
  if (!path.empty() && (named || std::filesystem::exists(path, ec))) {
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, "config file"));
    ASSIGN_OR_RETURN(config, ParseClientConfig(text, path));
  }
  ClientOptions o;
  o.server = args.server;
  if (const std::string* v = Find(config, "server");
      v != nullptr && !args.server_set) {
    o.server = *v;
  }
  if (!args.token.empty()) {
    o.token = args.token;
    RETURN_IF_ERROR(CheckBearerToken(o.token, "--token"));
  } else if (!args.token_file.empty()) {
    ASSIGN_OR_RETURN(o.token, ReadTokenFile(args.token_file, "--token-file"));
  } else if (Set(env.token)) {
    o.token = env.token;
    RETURN_IF_ERROR(CheckBearerToken(o.token, "$YARD_TOKEN"));
  } else if (const std::string* v = Find(config, "token")) {
    o.token = *v;
    RETURN_IF_ERROR(CheckBearerToken(o.token, absl::StrCat(path, ": token")));
  } else if (const std::string* f = Find(config, "token_file")) {
    ASSIGN_OR_RETURN(o.token, ReadTokenFile(*f, "token_file"));
  }
  if (!args.tls_ca.empty()) {
    o.tls.ca = args.tls_ca;
  } else if (Set(env.tls_ca)) {
    o.tls.ca = env.tls_ca;
  } else if (const std::string* v = Find(config, "tls_ca")) {
    o.tls.ca = *v;
  }
  if (!args.tls_server_name.empty()) {
    o.tls.server_name = args.tls_server_name;
  } else if (const std::string* v = Find(config, "tls_server_name")) {
    o.tls.server_name = *v;
  }
  return o;
}

}  // namespace trainyard::client
