#include "common/config.h"

#include <cstdio>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/log.h"
#include "common/status_util.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace kernelrl {

namespace {
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Collects the first parse error as "source:line:col: message".
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(std::string source) : source_(std::move(source)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string source_;
  std::string error_;
};

}  // namespace

absl::Status MergeTextConfig(absl::string_view text, absl::string_view source,
                             google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors{std::string(source)};
  parser.RecordErrorsTo(&errors);
  // Unknown fields stay errors (the parser's default); we say so explicitly
  // because a typo in a config must never be silently ignored.
  parser.AllowUnknownField(false);
  if (!parser.MergeFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(errors.error().empty() ? absl::StrCat(source, ": invalid config")
                                                             : errors.error());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DottedAssignmentToText(absl::string_view assignment, const Descriptor* descriptor) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": expected path.to.field=value"));
  }
  const std::vector<std::string> path = absl::StrSplit(assignment.substr(0, eq), '.');
  std::string value(assignment.substr(eq + 1));
  std::string open, close;
  for (size_t i = 0; i < path.size(); ++i) {
    const FieldDescriptor* field = descriptor->FindFieldByName(path[i]);
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": ", descriptor->full_name(),
                                                     " has no field named \"", path[i], "\""));
    }
    const bool last = i + 1 == path.size();
    if (!last) {
      if (field->type() != FieldDescriptor::TYPE_MESSAGE) {
        return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": ", path[i], " is not a message"));
      }
      absl::StrAppend(&open, path[i], " { ");
      close = " }" + close;
      descriptor = field->message_type();
      continue;
    }
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      absl::StrAppend(&open, path[i], " { ", value, " }");
    } else {
      const bool stringy = field->type() == FieldDescriptor::TYPE_STRING || field->type() == FieldDescriptor::TYPE_BYTES;
      const bool quoted = value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front();
      if (stringy && !quoted) value = absl::StrCat("\"", absl::CEscape(value), "\"");
      absl::StrAppend(&open, path[i], ": ", value);
    }
  }
  return open + close;
}

absl::StatusOr<ConfigRequest> LoadConfig(int argc, char** argv, absl::string_view defaults_text,
                                         google::protobuf::Message* config) {
  return LoadConfigKeepingRest(argc, argv, defaults_text, config, nullptr);
}

absl::StatusOr<ConfigRequest> LoadConfigKeepingRest(int argc, char** argv, absl::string_view defaults_text,
                                                    google::protobuf::Message* config, std::vector<char*>* rest) {
  KR_RETURN_IF_ERROR(MergeTextConfig(defaults_text, "built-in defaults", config));
  ConfigRequest request;
  std::vector<std::pair<std::string, std::string>> overrides;  // (source, text), applied after the file
  std::vector<std::string> files;  // Merged in the order given: presets layer.
  if (rest != nullptr && argc > 0) rest->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    // The flag's name is matched whole: "--settle" is not "--set".
    const absl::string_view name = arg.substr(0, arg.find('='));
    auto value_of = [&](absl::string_view flag) -> absl::StatusOr<std::string> {
      if (name.size() < arg.size()) return std::string(arg.substr(flag.size() + 1));
      if (i + 1 < argc) return std::string(argv[++i]);
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    };
    if (arg == "--help" || arg == "-h") {
      request.help = true;
    } else if (arg == "--print_config") {
      request.print_config = true;
    } else if (name == "--config_text") {
      KR_ASSIGN_OR_RETURN(std::string text, value_of("--config_text"));
      overrides.emplace_back("--config_text", text);
    } else if (name == "--config") {
      KR_ASSIGN_OR_RETURN(std::string file, value_of("--config"));
      files.push_back(std::move(file));
    } else if (name == "--set") {
      KR_ASSIGN_OR_RETURN(std::string assignment, value_of("--set"));
      KR_ASSIGN_OR_RETURN(std::string text, DottedAssignmentToText(assignment, config->GetDescriptor()));
      overrides.emplace_back(absl::StrCat("--set ", assignment), text);
    } else if (rest != nullptr) {
      rest->push_back(argv[i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", arg, "' (see --help)"));
    }
  }
  for (const std::string& file : files) {
    absl::StatusOr<std::string> text = ReadFileToString(file);
    if (!text.ok()) return Annotate(text.status(), "config file");
    KR_RETURN_IF_ERROR(MergeTextConfig(*text, file, config));
  }
  for (const auto& [source, text] : overrides) KR_RETURN_IF_ERROR(MergeTextConfig(text, source, config));
  return request;
}

absl::Status ValidateServerConfig(ServerConfig* server) {
  if (server->listen_address().empty()) server->set_listen_address("127.0.0.1");
  if (server->grpc_port() < 0 || server->grpc_port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.grpc_port: ", server->grpc_port(), " is outside 0..65535 (0 picks a free port)"));
  }
  if (server->metrics_port() < -1 || server->metrics_port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("server.metrics_port: ", server->metrics_port(),
                                                   " is outside -1..65535 (0 picks a free port, -1 disables)"));
  }
  if (server->drain_seconds() < 0 || server->grace_seconds() < 0) {
    return absl::InvalidArgumentError("server.drain_seconds and server.grace_seconds must be >= 0");
  }
  if (server->metrics_max_series() < 0) {
    return absl::InvalidArgumentError("server.metrics_max_series must be >= 0");
  }
  if (server->metrics_max_series() == 0) server->set_metrics_max_series(1000);
  LogLevel level;
  if (!ParseLogLevel(server->log_level(), &level)) {
    return absl::InvalidArgumentError(absl::StrCat("server.log_level: '", server->log_level(),
                                                   "' is not one of debug, info, warning, error"));
  }
  return absl::OkStatus();
}

std::optional<int> StartTool(int argc, char** argv, absl::string_view name, absl::string_view defaults_text,
                             absl::string_view run_flags, google::protobuf::Message* config,
                             const std::function<std::string()>& effective_text) {
  std::vector<char*> run_args;
  absl::StatusOr<ConfigRequest> request = LoadConfigKeepingRest(argc, argv, defaults_text, config, &run_args);
  if (!request.ok()) {
    KLOG(ERROR) << name << ": bad configuration: " << request.status().message();
    return 2;
  }
  if (request->help) {
    std::printf("%s  Run flags: %s\n", ConfigUsage(name, config->GetDescriptor()->full_name()).c_str(),
                std::string(run_flags).c_str());
    return 0;
  }
  if (request->print_config) {
    std::printf("%s", effective_text().c_str());
    return 0;
  }
  absl::ParseCommandLine(static_cast<int>(run_args.size()), run_args.data());
  return std::nullopt;
}

std::string TextProto(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(message, &text);
  return text;
}

std::string ConfigUsage(absl::string_view binary, absl::string_view config_type) {
  return absl::StrCat("usage: ", binary, " [--config=FILE] [--config_text=TEXT] [--set=field.path=VALUE]...",
                      " [--print_config]\n  FILE and TEXT are protobuf text format of ", config_type,
                      " (see proto/*_config.proto).\n  Later flags override earlier ones; unknown fields are errors.\n");
}

}  // namespace kernelrl
