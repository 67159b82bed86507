// The one flag system of `kernelrl`'s subcommands. Each subcommand has a config
// message (proto/cli_config.proto, EvalConfig), filled in this order:
//   1. the subcommand's built-in defaults (protobuf text),
//   2. --config=FILE                 protobuf text, repeatable, in order,
//      --config_text=TEXT            protobuf text, repeatable,
//   3. --preset=NAME                 configs/<subcommand>/NAME.textproto, repeatable,
//   4. its human flags               each maps onto fields (e.g. --actors=3 sets `actors`),
//   5. --set=path.to.field=VALUE     repeatable.
// Later sources win (repeated fields append). `--print_config` prints the
// result and exits 0, `--help` lists the flags with the fields they set. A bad
// flag, an unknown field or a malformed value is one line on stderr,
// "kernelrl <subcommand>: <what>", and exit code 2.
//
// Parsing is CLI11 (Debian libcli11-dev); the fields are set through protobuf
// text (common/config.h), so a flag and the field it sets validate one way.
#ifndef KERNELRL_TOOLS_CLI_COMMAND_LINE_H_
#define KERNELRL_TOOLS_CLI_COMMAND_LINE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace CLI {
class App;
}

namespace kernelrl::cli {

class CommandLine {
 public:
  // Turns a flag's value into protobuf text for the config (or an error).
  using Mapping = std::function<absl::StatusOr<std::string>(const std::string& value)>;

  // command: "up", "learn", ... (messages say "kernelrl <command>"; presets
  // come from configs/<command>/). `config` must outlive this.
  CommandLine(std::string command, std::string about, google::protobuf::Message* config);
  ~CommandLine();

  // --name=VALUE sets the field at the dotted path `field`. A name without
  // leading dashes is positional.
  void Flag(const std::string& name, const std::string& field, const std::string& help);
  // --name=VALUE becomes the text `map` returns.
  void Flag(const std::string& name, Mapping map, const std::string& help);
  // --name (no value; --name=false also works) sets the bool `field`.
  void Switch(const std::string& name, const std::string& field, const std::string& help);

  // configs/<command>/<name>.textproto is merged when neither --config nor
  // --preset is given (--config_text may be) (the subcommand's default experiment).
  void DefaultPreset(const std::string& name) { default_preset_ = name; }

  // Merges defaults and argv into the config. nullopt: go on and run. A code:
  // return it (0 after --help or --print_config; 2 after a one-line error).
  std::optional<int> Parse(int argc, char** argv, const std::string& defaults_text);

  // The --set assignments as given ("services.sandbox.verify.wall_seconds=30").
  const std::vector<std::string>& sets() const { return sets_; }

  // "field=value" as protobuf text of the config's type.
  absl::StatusOr<std::string> Assign(const std::string& field, const std::string& value) const;

  // Prints "kernelrl <command>: <message>" on stderr; returns 2.
  int Fail(const std::string& message) const;

 private:
  struct Human;
  absl::Status Merge(const std::string& defaults_text);

  const std::string command_;
  google::protobuf::Message* const config_;
  std::unique_ptr<CLI::App> app_;
  std::vector<std::unique_ptr<Human>> humans_;
  std::vector<std::string> config_files_, config_texts_, presets_, sets_;
  std::string default_preset_;
  bool print_config_ = false;
};

// configs/<command>/<name>.textproto under the source tree (the runfiles of
// this binary, or the working directory); NotFound names where it looked.
absl::StatusOr<std::string> PresetPath(const std::string& command, const std::string& name);

}  // namespace kernelrl::cli

#endif  // KERNELRL_TOOLS_CLI_COMMAND_LINE_H_
