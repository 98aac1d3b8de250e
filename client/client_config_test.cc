#include "client/client_config.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

CliArgs Args(const std::vector<std::string>& argv, const char* env_server) {
  absl::StatusOr<CliArgs> a = ParseArgs(argv, env_server);
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

TEST(ClientConfigTest, FlagsBeatEnvironmentBeatsConfigFile) {
  const std::string conf = WriteTemp(
      "yard.conf",
      "# comment\n\nserver = conf:1\ntoken = conf-token\ntls_ca = /conf-ca\n"
      "tls_server_name = conf.name\n");
  ClientEnv env;
  env.config = conf.c_str();
  // The config file alone.
  absl::StatusOr<ClientOptions> o = ResolveClientOptions(Args({"ls"}, nullptr), env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->server, "conf:1");
  EXPECT_EQ(o->token, "conf-token");
  EXPECT_EQ(o->tls.ca, "/conf-ca");
  EXPECT_EQ(o->tls.server_name, "conf.name");
  // The environment over the file.
  env.token = "env-token";
  env.tls_ca = "/env-ca";
  o = ResolveClientOptions(Args({"ls"}, "env:2"), env);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->server, "env:2");
  EXPECT_EQ(o->token, "env-token");
  EXPECT_EQ(o->tls.ca, "/env-ca");
  // Flags over both.
  o = ResolveClientOptions(
      Args({"--server", "flag:3", "--token", "flag-token", "--tls-ca",
            "/flag-ca", "ls"},
           "env:2"),
      env);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->server, "flag:3");
  EXPECT_EQ(o->token, "flag-token");
  EXPECT_EQ(o->tls.ca, "/flag-ca");
}

TEST(ClientConfigTest, TokenFilesAndTheDefaultConfigLocation) {
  const std::string token = WriteTemp("token", "  ytk_from_file \n");
  ClientEnv env;
  absl::StatusOr<ClientOptions> o =
      ResolveClientOptions(Args({"--token-file", token, "ls"}, nullptr), env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->token, "ytk_from_file");
  // XDG_CONFIG_HOME/trainyard/config, missing: fine, defaults apply.
  env.xdg_config_home = "/nonexistent-dir";
  o = ResolveClientOptions(Args({"ls"}, nullptr), env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->server, kDefaultServer);
  EXPECT_TRUE(o->token.empty());
  EXPECT_FALSE(o->tls.enabled());
}

TEST(ClientConfigTest, BadConfigsAreNamedWithTheirLine) {
  EXPECT_THAT(std::string(ParseClientConfig("server = a:1\nfrobnicate = 2\n",
                                            "/c")
                              .status()
                              .message()),
              HasSubstr("/c:2: unknown key \"frobnicate\""));
  EXPECT_THAT(
      std::string(ParseClientConfig("\n\njust words\n", "/c").status().message()),
      HasSubstr("/c:3: expected \"key = value\""));
  ClientEnv env;
  absl::StatusOr<ClientOptions> o = ResolveClientOptions(
      Args({"--config", "/nonexistent/yard.conf", "ls"}, nullptr), env);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("config file"));
  o = ResolveClientOptions(
      Args({"--token-file", "/nonexistent/token", "ls"}, nullptr), env);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--token-file"));
  const std::string empty = WriteTemp("empty-token", "\n");
  o = ResolveClientOptions(Args({"--token-file", empty, "ls"}, nullptr), env);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("empty"));
}

}  // namespace
}  // namespace trainyard::client
