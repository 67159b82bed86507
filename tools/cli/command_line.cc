#include "tools/cli/command_line.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "common/file.h"

namespace kernelrl::cli {

namespace fs = std::filesystem;

// One human flag: what CLI11 parsed into, and how it becomes config text.
struct CommandLine::Human {
  std::string name;
  Mapping map;
  std::vector<std::string> values;  // Value flags and positionals (each occurrence).
  bool switch_value = false;        // Switches.
  CLI::Option* option = nullptr;
  bool is_switch = false;
};

CommandLine::CommandLine(std::string command, std::string about, google::protobuf::Message* config)
    : command_(std::move(command)), config_(config),
      app_(std::make_unique<CLI::App>(about, "kernelrl " + command_)) {
  const std::string type = config->GetDescriptor()->full_name();
  app_->add_option("--config", config_files_, "A " + type + " in protobuf text format (repeatable, in order)");
  app_->add_option("--config_text", config_texts_, "Protobuf text of " + type + ", merged after --config");
  app_->add_option("--preset", presets_, "configs/" + command_ + "/NAME.textproto, merged after --config");
  app_->add_option("--set", sets_, "path.to.field=VALUE of " + type + " (repeatable; after every other flag)");
  app_->add_flag("--print_config", print_config_, "Print the effective " + type + " and exit");
  app_->footer("Precedence: built-in defaults < --config < --config_text < --preset < the flags above < --set.\n");
}

CommandLine::~CommandLine() = default;

void CommandLine::Flag(const std::string& name, const std::string& field, const std::string& help) {
  Flag(name, [this, field](const std::string& value) { return Assign(field, value); }, help + " [" + field + "]");
}

void CommandLine::Flag(const std::string& name, Mapping map, const std::string& help) {
  auto human = std::make_unique<Human>();
  human->name = name;
  human->map = std::move(map);
  human->option = app_->add_option(name, human->values, help)->type_name("VALUE");
  humans_.push_back(std::move(human));
}

void CommandLine::Switch(const std::string& name, const std::string& field, const std::string& help) {
  auto human = std::make_unique<Human>();
  human->name = name;
  human->is_switch = true;
  Human* h = human.get();
  human->map = [this, field, h](const std::string&) { return Assign(field, h->switch_value ? "true" : "false"); };
  human->option = app_->add_flag(name, human->switch_value, help + " [" + field + "]");
  humans_.push_back(std::move(human));
}

absl::StatusOr<std::string> CommandLine::Assign(const std::string& field, const std::string& value) const {
  return DottedAssignmentToText(field + "=" + value, config_->GetDescriptor());
}

int CommandLine::Fail(const std::string& message) const {
  std::fprintf(stderr, "kernelrl %s: %s\n", command_.c_str(), message.c_str());
  return 2;
}

absl::Status CommandLine::Merge(const std::string& defaults_text) {
  if (absl::Status s = MergeTextConfig(defaults_text, "built-in defaults", config_); !s.ok()) return s;
  auto merge_file = [this](const std::string& file) -> absl::Status {
    absl::StatusOr<std::string> text = ReadFileToString(file);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", file, ": ", text.status().message()));
    return MergeTextConfig(*text, file, config_);
  };
  for (const std::string& file : config_files_) {
    if (absl::Status s = merge_file(file); !s.ok()) return s;
  }
  for (const std::string& text : config_texts_) {
    if (absl::Status s = MergeTextConfig(text, "--config_text", config_); !s.ok()) return s;
  }
  std::vector<std::string> presets = presets_;
  if (config_files_.empty() && presets.empty() && !default_preset_.empty()) presets.push_back(default_preset_);
  for (const std::string& name : presets) {
    absl::StatusOr<std::string> path = PresetPath(command_, name);
    if (!path.ok()) return path.status();
    if (absl::Status s = merge_file(*path); !s.ok()) return s;
  }
  for (const auto& h : humans_) {
    if (h->option->count() == 0) continue;
    const std::vector<std::string> values = h->is_switch ? std::vector<std::string>{""} : h->values;
    for (const std::string& value : values) {
      absl::StatusOr<std::string> text = h->map(value);
      if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(h->name, "=", value, ": ", text.status().message()));
      if (absl::Status s = MergeTextConfig(*text, h->name, config_); !s.ok()) return s;
    }
  }
  for (const std::string& set : sets_) {
    absl::StatusOr<std::string> text = DottedAssignmentToText(set, config_->GetDescriptor());
    if (!text.ok()) return text.status();
    if (absl::Status s = MergeTextConfig(*text, "--set " + set, config_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::optional<int> CommandLine::Parse(int argc, char** argv, const std::string& defaults_text) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app_->help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return Fail(absl::StrCat(e.what(), " (kernelrl ", command_, " --help)"));
  }
  if (absl::Status s = Merge(defaults_text); !s.ok()) return Fail(std::string(s.message()));
  if (print_config_) {
    std::fputs(TextProto(*config_).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> PresetPath(const std::string& command, const std::string& name) {
  std::vector<std::string> roots;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(self.string() + ".runfiles/kernelrl");
  if (const char* rf = getenv("RUNFILES_DIR")) roots.push_back(std::string(rf) + "/kernelrl");
  roots.push_back(fs::current_path(ec).string());
  std::vector<std::string> tried;
  for (const std::string& root : roots) {
    const std::string path = absl::StrCat(root, "/configs/", command, "/", name, ".textproto");
    if (access(path.c_str(), R_OK) == 0) return path;
    tried.push_back(path);
  }
  return absl::NotFoundError(absl::StrCat("--preset ", name, ": none of ", absl::StrJoin(tried, ", ")));
}

}  // namespace kernelrl::cli
