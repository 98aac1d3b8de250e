// yard-server: the Trainyard scheduler daemon. Parses flags, starts the
// server, and waits for SIGTERM or SIGINT to shut down gracefully.
// Exit codes: 0 after a graceful shutdown (or --help), 1 when the server
// cannot start (the reason on stderr), 2 for bad flags.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/grpc_log.h"
#include "common/log.h"
#include "server/server_flags.h"
#include "server/yard_server.h"

int main(int argc, char** argv) {
  using trainyard::server::ParseServerFlags;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto cl = ParseServerFlags(args);
  if (!cl.ok()) {
    std::cerr << "yard-server: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help) {
    std::cout << trainyard::server::ServerUsage();
    return 0;
  }
  if (absl::Status s = trainyard::server::CheckServerOptions(cl->options);
      !s.ok()) {
    std::cerr << "yard-server: " << s.message() << "\n";
    return 2;
  }
  // Block the stop signals in every thread; the main thread takes them with
  // sigwait, so no async-signal-safety games are needed.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  trainyard::RouteGrpcLogs();

  auto server = trainyard::server::YardServer::Start(std::move(cl->options));
  if (!server.ok()) {
    std::cerr << "yard-server: " << server.status().message() << "\n";
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  YARD_LOG(INFO) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
                 << "; shutting down";
  (*server)->Shutdown();
  return 0;
}
