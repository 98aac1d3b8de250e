// Where `yard` gets the server address, token and TLS settings. For each,
// the first that is set wins: the command-line flag, the environment
// variable, the config file, the default.
//
//   server           --server   YARD_SERVER   server           127.0.0.1:7070
//   token            --token    YARD_TOKEN    token
//   token file       --token-file             token_file
//   TLS CA           --tls-ca   YARD_TLS_CA   tls_ca           (plaintext)
//   TLS server name  --tls-server-name        tls_server_name
//
// The config file is --config, else $YARD_CONFIG, else
// $XDG_CONFIG_HOME/trainyard/config (~/.config/trainyard/config); a missing
// default file is fine, a missing named one is an error. Its lines are
// "key = value"; blank lines and lines starting with '#' are ignored; an
// unknown key or a malformed line is an error naming the file and line.
// Pure apart from reading files; thread-safe.
#ifndef TRAINYARD_CLIENT_CLIENT_CONFIG_H_
#define TRAINYARD_CLIENT_CLIENT_CONFIG_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "client/cli_args.h"
#include "client/job_client.h"

namespace trainyard::client {

// The environment variables consulted (null when unset).
struct ClientEnv {
  const char* token = nullptr;            // YARD_TOKEN
  const char* config = nullptr;           // YARD_CONFIG
  const char* tls_ca = nullptr;           // YARD_TLS_CA
  const char* home = nullptr;             // HOME
  const char* xdg_config_home = nullptr;  // XDG_CONFIG_HOME

  static ClientEnv FromProcess();
};

// Parses config file text; INVALID_ARGUMENT names `path` and the line.
absl::StatusOr<std::map<std::string, std::string>> ParseClientConfig(
    const std::string& text, const std::string& path);

// INVALID_ARGUMENT for an unreadable named config or token file.
absl::StatusOr<ClientOptions> ResolveClientOptions(const CliArgs& args,
                                                   const ClientEnv& env);

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_CLIENT_CONFIG_H_
