#include "learner/sync/external_weight_sync.h"

#include <chrono>
#include <filesystem>

#include "httplib.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace kernelrl::learner {
namespace {

// A weight_version as the servers report it: the decimal string we set.
absl::StatusOr<int64_t> ParseVersion(const Json* v, const std::string& where) {
  int64_t out = -1;
  if (v != nullptr && v->is_string() && absl::SimpleAtoi(v->get<std::string>(), &out) && out >= 0) return out;
  return absl::DataLossError(absl::StrCat(where, ": weight_version ", v == nullptr ? "absent" : DumpJson(*v),
                                          " is not a policy version"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExternalWeightSync>> ExternalWeightSync::Create(
    const v1::ExternalPolicyServers& config) {
  if (config.server() != "sglang" && config.server() != "vllm") {
    return absl::InvalidArgumentError(absl::StrCat("policy.external.server \"", config.server(), "\": sglang or vllm"));
  }
  if (config.addresses().empty()) return absl::InvalidArgumentError("policy.external.addresses is empty");
  auto sync = std::unique_ptr<ExternalWeightSync>(new ExternalWeightSync(config));
  for (std::string a : config.addresses()) {
    while (absl::EndsWith(a, "/")) a.pop_back();
    if (!absl::StartsWith(a, "http://") && !absl::StartsWith(a, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat("policy.external.addresses: \"", a, "\" is not a base URL"));
    }
    sync->servers_.push_back(Server{a});
  }
  for (size_t i = 0; i < sync->servers_.size(); ++i) {
    if (auto s = sync->LabelBase(i); !s.ok()) {
      KLOG(WARNING) << sync->servers_[i].base_url << ": no version label yet (" << s
                    << "); actors stamping from it fail until the learner's first update";
    }
  }
  return sync;
}

ExternalWeightSync::ExternalWeightSync(v1::ExternalPolicyServers config) : config_(std::move(config)) {}

absl::StatusOr<Json> ExternalWeightSync::Call(const Server& s, const std::string& method, const std::string& path,
                                              const Json* body) const {
  httplib::Client client(s.base_url);
  const double t = config_.timeout_seconds() > 0 ? config_.timeout_seconds() : 600;
  const auto us = std::chrono::microseconds(static_cast<int64_t>(t * 1e6));
  client.set_connection_timeout(10, 0);
  client.set_read_timeout(us);
  client.set_write_timeout(us);
  const std::string what = absl::StrCat(method, " ", s.base_url, path);
  httplib::Result res = method == "GET" ? client.Get(path)
                                        : client.Post(path, body != nullptr ? DumpJson(*body) : "{}", "application/json");
  if (!res) return absl::UnavailableError(absl::StrCat(what, ": ", httplib::to_string(res.error())));
  if (res->status != 200) {
    return absl::Status(res->status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat(what, ": HTTP ", res->status, ": ", res->body.substr(0, 300)));
  }
  absl::StatusOr<Json> j = ParseJson(res->body.empty() ? "{}" : res->body);
  if (!j.ok() || !j->is_object()) return absl::DataLossError(absl::StrCat(what, ": the reply is not a JSON object"));
  return j;
}

absl::StatusOr<int64_t> ExternalWeightSync::ServedVersion(size_t i) const {
  const Server& s = servers_.at(i);
  const std::string path = config_.server() == "sglang" ? "/get_weight_version" : "/weight_info";
  absl::StatusOr<Json> j = Call(s, "GET", path, nullptr);
  if (!j.ok()) return j.status();
  return ParseVersion(FindJson(*j, "weight_version"), s.base_url + path);
}

absl::Status ExternalWeightSync::LabelBase(size_t i) {
  const Server& s = servers_[i];
  const std::string path = config_.server() == "sglang" ? "/get_weight_version" : "/weight_info";
  absl::StatusOr<Json> j = Call(s, "GET", path, nullptr);
  if (!j.ok()) return j.status();
  const Json* v = FindJson(*j, "weight_version");
  if (v != nullptr && !v->is_null()) return absl::OkStatus();  // Labelled already (a resumed job relabels).
  const Json body = Json::object({{"new_version", Json("0")}, {"abort_all_requests", Json(false)}});
  return Call(s, "POST", "/update_weight_version", &body).status();
}

absl::Status ExternalWeightSync::PublishSglang(Server* s, const std::string& dir, int64_t version) {
  const Json body = Json::object({{"model_path", Json(dir)},
                                  {"weight_version", Json(absl::StrCat(version))},
                                  {"abort_all_requests", Json(false)}});
  absl::StatusOr<Json> j = Call(*s, "POST", "/update_weights_from_disk", &body);
  if (!j.ok()) return j.status();
  if (const Json* ok = FindJson(*j, "success"); ok == nullptr || !ok->is_boolean() || !ok->get<bool>()) {
    return absl::FailedPreconditionError(absl::StrCat(s->base_url, "/update_weights_from_disk refused ", dir, ": ",
                                                      GetJsonString(*j, "message", "").value_or("")));
  }
  return absl::OkStatus();
}

absl::Status ExternalWeightSync::PublishVllm(Server* s, const std::string& dir, int64_t version) {
  if (!s->transfer_ready) {
    const Json init = Json::object({{"init_info", Json::object()}});
    if (auto j = Call(*s, "POST", "/init_weight_transfer_engine", &init); !j.ok()) return j.status();
    s->transfer_ready = true;
  }
  // Requests in flight finish on the old weights; new ones wait for /resume.
  if (auto j = Call(*s, "POST", "/pause?mode=wait", nullptr); !j.ok()) return j.status();
  absl::Status status = [&]() -> absl::Status {
    if (auto j = Call(*s, "POST", "/start_weight_update", nullptr); !j.ok()) return j.status();
    const Json update = Json::object({{"update_info", Json::object({{"path", Json(dir)}})}});
    if (auto j = Call(*s, "POST", "/update_weights", &update); !j.ok()) return j.status();
    const Json finish = Json::object({{"weight_version", Json(absl::StrCat(version))}});
    if (auto j = Call(*s, "POST", "/finish_weight_update", &finish); !j.ok()) return j.status();
    return absl::OkStatus();
  }();
  // Resumed whatever happened: a server left paused would stall every actor.
  if (auto j = Call(*s, "POST", "/resume", nullptr); !j.ok() && status.ok()) status = j.status();
  return status;
}

absl::Status ExternalWeightSync::Publish(const std::string& hf_dir, int64_t version) {
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(hf_dir, ec).lexically_normal().string();  // vLLM needs it absolute.
  if (ec) return absl::InvalidArgumentError(absl::StrCat(hf_dir, ": ", ec.message()));
  absl::Status first;
  for (size_t i = 0; i < servers_.size(); ++i) {
    Server& s = servers_[i];
    absl::Status st = config_.server() == "sglang" ? PublishSglang(&s, dir, version) : PublishVllm(&s, dir, version);
    if (st.ok()) {
      absl::StatusOr<int64_t> served = ServedVersion(i);
      if (!served.ok()) {
        st = served.status();
      } else if (*served != version) {
        st = absl::DataLossError(absl::StrCat(s.base_url, " reports weight_version ", *served, " after loading ",
                                              version));
      }
    }
    if (!st.ok()) {
      KLOG(WARNING) << "weight sync of version " << version << " to " << s.base_url << ": " << st;
      if (first.ok()) first = st;
    }
  }
  return first;
}

}  // namespace kernelrl::learner
