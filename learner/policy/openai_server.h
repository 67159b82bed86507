// The OpenAI-compatible HTTP API over the policy engine: the same
// PolicyEngine the gRPC kernelrl.v1.Policy service uses, so the `openai`
// Python client, vLLM-style clients and the actor's openai_* backends can
// all talk to the learner's built-in server.
//
//   GET  /v1/models, /v1/models/{name}, /health
//   POST /v1/completions, /v1/chat/completions (stream: true -> SSE)
//
// Wire format: learner/policy/openai_server_protocol.h. Errors are OpenAI's
// {"error": {"message", "type", "param", "code"}} with the HTTP status of the
// cause (400 bad request, 404 unknown model or route, 405 wrong method, 503
// engine stopping, 500 otherwise).
//
// Streaming: each choice's chunks go out as the engine samples its tokens
// (PolicyEngine's on_token), a token's chunk held back only while a later
// token may still make it the last one or part of a stop string
// (openai::ChoiceStream); choices of one request interleave, by index. An
// error before any token answers with its HTTP status as a plain request
// does; one after the stream began is sent as an {"error": ...} event before
// [DONE].
//
// Threads: httplib's pool of `threads` workers; each request blocks one on
// PolicyEngine::Generate (a stream: on its next chunk) (choices of one request run concurrently and batch
// in the engine). Handle() is the whole server without a socket.
#ifndef KERNELRL_LEARNER_POLICY_OPENAI_SERVER_H_
#define KERNELRL_LEARNER_POLICY_OPENAI_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/tokenizer/tokenizer.h"
#include "learner/policy/engine.h"
#include "proto/learner_config.pb.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kernelrl::learner {

struct OpenAIServerOptions {
  std::string model_name = "kernelrl-policy";  // The API's "model".
  int64_t max_seq_len = 4096;                  // The engine's (prompt + output).
  int threads = 8;
};

struct HttpReply {
  int status = 200;
  std::string body;  // JSON, unless streaming.
  // Streaming (else null): blocks until the next SSE payload, sent as
  // "data: <payload>\n\n"; the last one is "[DONE]". Holding it keeps the
  // generation's state; dropping it waits for the generation to end.
  std::function<std::string()> next_event;
};

class OpenAIServer {
 public:
  // engine and tokenizer must outlive the server.
  OpenAIServer(PolicyEngine* engine, const agent::Tokenizer* tokenizer, OpenAIServerOptions options);
  ~OpenAIServer();  // Stop().
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // Binds address:port (0 picks a free port) and serves; returns the port.
  absl::StatusOr<int> Start(const std::string& address, int port);
  // Stops accepting, lets running requests finish, joins.
  void Stop();

  // The learner's server from its config (policy.openai_*; tokenizer_path
  // defaults to model_path/tokenizer.json, the name to model_path's
  // basename), started on listen_address:openai_port; the port is written to
  // openai_port_file when set. The server owns the tokenizer it loads.
  static absl::StatusOr<std::unique_ptr<OpenAIServer>> StartFromConfig(const v1::PolicyServerConfig& config,
                                                                       const std::string& listen_address,
                                                                       PolicyEngine* engine);

  // One request, routed and answered, without the network.
  HttpReply Handle(const std::string& method, const std::string& path, const std::string& body) const;

 private:
  HttpReply Generate(const std::string& path, const std::string& body) const;
  HttpReply Models(const std::string& path) const;

  std::unique_ptr<agent::Tokenizer> owned_tokenizer_;  // StartFromConfig's.
  PolicyEngine* const engine_;
  const agent::Tokenizer* const tokenizer_;
  const OpenAIServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

}  // namespace kernelrl::learner

#endif  // KERNELRL_LEARNER_POLICY_OPENAI_SERVER_H_
