#include "learner/policy/openai_server.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <future>

#include "httplib.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/http_listen.h"
#include "common/json.h"
#include "common/log.h"
#include "learner/policy/openai_server_protocol.h"

namespace kernelrl::learner {
namespace {

HttpReply JsonReply(int status, const Json& body) {
  HttpReply r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

HttpReply ErrorReply(const absl::Status& status) {
  return JsonReply(openai::HttpStatusFor(status), openai::ErrorBody(status));
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t t = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return absl::StrCat(prefix, absl::Hex(t, absl::kZeroPad16), absl::Hex(counter.fetch_add(1), absl::kZeroPad8));
}

// A streamed request: its generations feed tokens and results in (engine
// thread, Generate's callers), the HTTP worker drains them as SSE payloads
// through the choices' ChoiceStreams.
class StreamedReply {
 public:
  struct Item {
    size_t choice = 0;
    bool finished = false;  // Else a token.
    int32_t id = 0;
    float logprob = 0;
    int64_t version = 0;
    absl::StatusOr<GenerationResult> result;
  };
  // Thread-safe queue between the producers and Next().
  struct Feed {
    absl::Mutex mu;
    std::deque<Item> items ABSL_GUARDED_BY(mu);
    void Push(Item item) ABSL_LOCKS_EXCLUDED(mu) {
      absl::MutexLock lock(&mu);
      items.push_back(std::move(item));
    }
    Item Pop() ABSL_LOCKS_EXCLUDED(mu) {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(+[](std::deque<Item>* q) { return !q->empty(); }, &items));
      Item item = std::move(items.front());
      items.pop_front();
      return item;
    }
  };

  StreamedReply(openai::ReplyContext ctx, openai::ApiRequest req, size_t n)
      : ctx_(std::move(ctx)), req_(std::move(req)), choices_(n) {
    streams_.reserve(n);
    for (size_t i = 0; i < n; ++i) streams_.emplace_back(ctx_, req_, i);
  }
  ~StreamedReply() { work_.clear(); }  // Waits for the generations (they feed feed_ only).

  std::shared_ptr<Feed> feed() const { return feed_; }
  void Add(size_t choice, int prompt_index, std::future<void> work) {
    choices_[choice].prompt_index = prompt_index;
    work_.push_back(std::move(work));
  }

  // Waits for the first token or result: a failure before anything was
  // streamed is returned (after every generation ended) to be answered with
  // its HTTP status.
  absl::Status EarlyError() {
    Item first = feed_->Pop();
    if (first.finished && !first.result.ok()) {
      work_.clear();
      return first.result.status();
    }
    Take(std::move(first));
    return absl::OkStatus();
  }

  std::string Next() {
    while (out_.empty()) Take(feed_->Pop());
    std::string e = std::move(out_.front());
    out_.pop_front();
    return e;
  }

 private:
  void Take(Item item) {
    auto emit = [this](std::vector<std::string> events) {
      if (!failed_.ok()) return;
      for (std::string& e : events) out_.push_back(std::move(e));
    };
    openai::ChoiceStream& stream = streams_[item.choice];
    if (!item.finished) {
      emit(stream.Token(item.id, item.logprob, item.version));
      return;
    }
    ++finished_;
    if (!item.result.ok() && failed_.ok()) {
      failed_ = item.result.status();
      out_.push_back(DumpJson(openai::ErrorBody(failed_)));
    } else if (item.result.ok()) {
      choices_[item.choice].result = *item.result;
      emit(stream.Finish(*item.result));
    }
    if (finished_ < choices_.size()) return;
    if (failed_.ok() && req_.include_usage) out_.push_back(openai::UsageChunk(ctx_, req_, choices_));
    out_.push_back("[DONE]");
  }

  const openai::ReplyContext ctx_;
  const openai::ApiRequest req_;
  std::shared_ptr<Feed> feed_ = std::make_shared<Feed>();
  std::vector<openai::ChoiceStream> streams_;
  std::vector<openai::Choice> choices_;
  size_t finished_ = 0;
  absl::Status failed_;
  std::deque<std::string> out_;
  std::vector<std::future<void>> work_;
};

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OpenAIServer::OpenAIServer(PolicyEngine* engine, const agent::Tokenizer* tokenizer, OpenAIServerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)) {}

OpenAIServer::~OpenAIServer() { Stop(); }

HttpReply OpenAIServer::Handle(const std::string& method, const std::string& path, const std::string& body) const {
  const bool generate = path == "/v1/completions" || path == "/v1/chat/completions";
  const bool models = path == "/v1/models" || absl::StartsWith(path, "/v1/models/");
  if (path == "/health") return JsonReply(200, Json::object());
  if (!generate && !models) {
    return ErrorReply(absl::NotFoundError(absl::StrCat("Unknown route ", method, " ", path)));
  }
  if ((generate && method != "POST") || (models && method != "GET")) {
    HttpReply r = ErrorReply(absl::InvalidArgumentError(absl::StrCat("Method ", method, " not allowed on ", path)));
    r.status = 405;
    return r;
  }
  return generate ? Generate(path, body) : Models(path);
}

HttpReply OpenAIServer::Models(const std::string& path) const {
  const PolicyEngine::Info info = engine_->GetInfo();
  Json model = Json::object({{"id", Json(options_.model_name)},
                             {"object", Json("model")},
                             {"created", Json(UnixNow())},
                             {"owned_by", Json("kernelrl")},
                             {"root", Json(info.checkpoint_path)},
                             {"max_model_len", Json(options_.max_seq_len)},
                             {"policy_version", Json(info.policy_version)}});
  if (path == "/v1/models") {
    return JsonReply(200, Json::object({{"object", Json("list")}, {"data", Json::array({model})}}));
  }
  const std::string name = path.substr(std::string("/v1/models/").size());
  if (name != options_.model_name) {
    absl::Status s = openai::CheckModel(Json::object({{"model", Json(name)}}), options_.model_name);
    return ErrorReply(s);
  }
  return JsonReply(200, model);
}

HttpReply OpenAIServer::Generate(const std::string& path, const std::string& body_text) const {
  absl::StatusOr<Json> body = ParseJson(body_text);
  if (!body.ok()) {
    return ErrorReply(openai::BadParam("", absl::StrCat("The request body is not valid JSON: ", body.status().message())));
  }
  if (absl::Status s = openai::CheckModel(*body, options_.model_name); !s.ok()) return ErrorReply(s);
  const bool chat = path == "/v1/chat/completions";
  absl::StatusOr<openai::ApiRequest> req = chat ? openai::ParseChatRequest(*body, *tokenizer_, options_.max_seq_len)
                                                : openai::ParseCompletionRequest(*body, *tokenizer_, options_.max_seq_len);
  if (!req.ok()) return ErrorReply(req.status());

  // Every (prompt, choice) at once: the engine batches them.
  const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
  const openai::ReplyContext ctx{id, UnixNow(), options_.model_name, tokenizer_};
  auto engine_request = [&](size_t p, int j) {
    GenerationRequest g;
    g.prompt = req->prompts[p];
    g.sampling = req->sampling;
    if (g.sampling.seed != 0) g.sampling.seed += static_cast<uint64_t>(p * req->n + j);
    g.request_id = absl::StrCat(id, "/", p * req->n + j);
    return g;
  };
  // The engine validates ids against the model's vocabulary.
  auto error_reply = [&](const absl::Status& failed) {
    if (failed.code() == absl::StatusCode::kInvalidArgument) {
      return ErrorReply(openai::BadParam(chat ? "messages" : "prompt", std::string(failed.message())));
    }
    return ErrorReply(failed);
  };
  if (req->stream) {
    const size_t n = req->prompts.size() * static_cast<size_t>(req->n);
    auto reply = std::make_shared<StreamedReply>(ctx, *req, n);
    std::shared_ptr<StreamedReply::Feed> feed = reply->feed();
    for (size_t p = 0; p < req->prompts.size(); ++p) {
      for (int j = 0; j < req->n; ++j) {
        const size_t c = p * static_cast<size_t>(req->n) + static_cast<size_t>(j);
        GenerationRequest g = engine_request(p, j);
        g.on_token = [feed, c](int32_t token, float logprob, int64_t version) {
          StreamedReply::Item item;
          item.choice = c;
          item.id = token;
          item.logprob = logprob;
          item.version = version;
          feed->Push(std::move(item));
        };
        reply->Add(c, static_cast<int>(p), std::async(std::launch::async, [this, feed, c, g = std::move(g)]() mutable {
          StreamedReply::Item done;
          done.choice = c;
          done.finished = true;
          done.result = engine_->Generate(std::move(g));
          feed->Push(std::move(done));
        }));
      }
    }
    if (absl::Status s = reply->EarlyError(); !s.ok()) return error_reply(s);
    HttpReply r;
    r.next_event = [reply] { return reply->Next(); };
    return r;
  }
  std::vector<std::future<absl::StatusOr<GenerationResult>>> futures;
  std::vector<openai::Choice> choices;
  for (size_t p = 0; p < req->prompts.size(); ++p) {
    for (int j = 0; j < req->n; ++j) {
      choices.push_back({static_cast<int>(p), {}});
      futures.push_back(std::async(std::launch::async, [this, g = engine_request(p, j)]() mutable {
        return engine_->Generate(std::move(g));
      }));
    }
  }
  absl::Status failed;
  for (size_t i = 0; i < futures.size(); ++i) {
    absl::StatusOr<GenerationResult> r = futures[i].get();
    if (!r.ok()) {
      if (failed.ok()) failed = r.status();
      continue;
    }
    choices[i].result = *std::move(r);
  }
  if (!failed.ok()) return error_reply(failed);
  return JsonReply(200, openai::CompletionResponse(ctx, *req, choices));
}

absl::StatusOr<int> OpenAIServer::Start(const std::string& address, int port) {
  if (http_ != nullptr) return absl::FailedPreconditionError("OpenAIServer already started");
  http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(1, options_.threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(64 << 20);
  auto serve = [this](const httplib::Request& req, httplib::Response& res) {
    HttpReply reply = Handle(req.method, req.path, req.body);
    res.status = reply.status;
    if (reply.next_event == nullptr) {
      res.set_content(reply.body, "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    // Blocks this worker on the generation, one chunk at a time.
    res.set_chunked_content_provider("text/event-stream",
                                     [next = std::move(reply.next_event)](size_t, httplib::DataSink& sink) {
                                       const std::string event = next();
                                       const std::string frame = absl::StrCat("data: ", event, "\n\n");
                                       if (!sink.write(frame.data(), frame.size())) return false;
                                       if (event == "[DONE]") sink.done();
                                       return true;
                                     });
  };
  // Every route goes through Handle() (unknown ones answer 404 JSON there).
  const std::string any = R"(/.*)";
  http_->Get(any, serve);
  http_->Post(any, serve);
  http_->Put(any, serve);
  http_->Delete(any, serve);
  http_->Patch(any, serve);
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(DumpJson(openai::ErrorBody(absl::InternalError("internal error"))), "application/json");
  });
  const int bound = port == 0 ? http_->bind_to_any_port(address) : (http_->bind_to_port(address, port) ? port : -1);
  if (bound <= 0) {
    http_.reset();
    return absl::UnavailableError(absl::StrCat("OpenAI API: cannot listen on ", address, ":", port));
  }
  absl::StatusOr<std::thread> loop = ListenInBackground(http_.get());
  if (!loop.ok()) return loop.status();
  thread_ = std::move(*loop);
  KLOG(INFO) << "OpenAI-compatible API on http://" << address << ":" << bound << "/v1 (model \""
             << options_.model_name << "\")";
  return bound;
}

absl::StatusOr<std::unique_ptr<OpenAIServer>> OpenAIServer::StartFromConfig(const v1::PolicyServerConfig& config,
                                                                           const std::string& listen_address,
                                                                           PolicyEngine* engine) {
  std::string model_path = config.model_path();
  while (model_path.size() > 1 && model_path.back() == '/') model_path.pop_back();
  const std::string tokenizer_path =
      config.tokenizer_path().empty() ? model_path + "/tokenizer.json" : config.tokenizer_path();
  absl::StatusOr<std::unique_ptr<agent::Tokenizer>> tokenizer = agent::Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy.tokenizer_path: ", tokenizer.status().message()));
  }
  OpenAIServerOptions options;
  options.model_name = config.served_model_name().empty() ? model_path.substr(model_path.rfind('/') + 1)
                                                          : config.served_model_name();
  options.max_seq_len = config.max_seq_len() > 0 ? config.max_seq_len() : EngineOptions().max_seq_len;
  const int batch = config.max_batch() > 0 ? config.max_batch() : EngineOptions().max_batch;
  options.threads = config.openai_threads() > 0 ? config.openai_threads() : std::max(8, 2 * batch);
  auto server = std::make_unique<OpenAIServer>(engine, tokenizer->get(), std::move(options));
  server->owned_tokenizer_ = *std::move(tokenizer);
  absl::StatusOr<int> port = server->Start(listen_address.empty() ? "127.0.0.1" : listen_address, config.openai_port());
  if (!port.ok()) return port.status();
  if (!config.openai_port_file().empty()) {
    if (absl::Status s = WriteFileAtomically(config.openai_port_file(), absl::StrCat("openai_port=", *port, "\n"));
        !s.ok()) {
      return s;
    }
  }
  return server;
}

void OpenAIServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace kernelrl::learner
