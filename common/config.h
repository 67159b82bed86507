// One configuration mechanism for every kernelrl binary: a protobuf message
// (the service's *Config) filled from, in order,
//   1. the binary's built-in defaults (protobuf text),
//   2. --config=FILE             protobuf text format file (repeatable, merged in order),
//   3. --config_text=TEXT        protobuf text, e.g. 'server { grpc_port: 0 }',
//   4. --set=path.to.field=VALUE  repeatable, e.g. --set=server.grpc_port=8080.
// Later sources override earlier ones (repeated fields append). Unknown
// fields, unknown flags and malformed values are errors that name the source,
// line and field. `--print_config` prints the effective config and exits;
// `--help` lists the flags.
#ifndef KERNELRL_COMMON_CONFIG_H_
#define KERNELRL_COMMON_CONFIG_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "proto/server_config.pb.h"

namespace kernelrl {

using ::kernelrl::v1::ServerConfig;

// What the command line asked for besides the config itself.
struct ConfigRequest {
  bool print_config = false;
  bool help = false;
};

// Merges defaults, argv and the files it names into `config`, which should be
// freshly constructed (it is not cleared: callers may hold sub-message pointers).
absl::StatusOr<ConfigRequest> LoadConfig(int argc, char** argv, absl::string_view defaults_text,
                                         google::protobuf::Message* config);

// For command-line tools that also take arguments of one run (input files, an
// output path): the same config flags and precedence as LoadConfig, but every
// argument that is not a config flag is appended to `rest` (argv[0] first,
// order kept) for the tool's own parser instead of being an error. The run's
// arguments never restate config fields; those go through --set.
absl::StatusOr<ConfigRequest> LoadConfigKeepingRest(int argc, char** argv, absl::string_view defaults_text,
                                                    google::protobuf::Message* config, std::vector<char*>* rest);

// The start of a command-line tool's main: LoadConfigKeepingRest, then the
// tool's own absl flags from the rest. Bad configuration: logged, returns 2.
// --help prints the usage and `run_flags`, --print_config prints
// `effective_text()` (the config with the tool's defaults applied); both
// return 0. Otherwise the rest goes to absl::ParseCommandLine and the tool
// runs (std::nullopt).
std::optional<int> StartTool(int argc, char** argv, absl::string_view name, absl::string_view defaults_text,
                             absl::string_view run_flags, google::protobuf::Message* config,
                             const std::function<std::string()>& effective_text);

// `message` in protobuf text format.
std::string TextProto(const google::protobuf::Message& message);

// StartTool where the effective config is `with_defaults(*config)`.
template <typename Config>
std::optional<int> StartTool(int argc, char** argv, absl::string_view name, absl::string_view defaults_text,
                             absl::string_view run_flags, Config* config, Config (*with_defaults)(Config)) {
  return StartTool(argc, argv, name, defaults_text, run_flags, config,
                   [config, with_defaults] { return TextProto(with_defaults(*config)); });
}

// Parses protobuf text into `message` (merging), errors name `source` and line:column.
absl::Status MergeTextConfig(absl::string_view text, absl::string_view source, google::protobuf::Message* message);

// Turns "a.b.c=value" into text format for `message`'s type ("a { b { c: value } }"),
// quoting string values; errors name the unknown field.
absl::StatusOr<std::string> DottedAssignmentToText(absl::string_view assignment,
                                                   const google::protobuf::Descriptor* descriptor);

// Checks ports, durations and the log level; fills what proto3 cannot default
// (empty listen_address → 127.0.0.1, metrics_max_series 0 → 1000). Drain and
// grace defaults live in each binary's defaults text (kServerDefaults).
absl::Status ValidateServerConfig(ServerConfig* server);

// Text printed for --help.
std::string ConfigUsage(absl::string_view binary, absl::string_view config_type);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_CONFIG_H_
