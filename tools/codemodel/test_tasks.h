// The tasks the code model's tests run the engineer on.
#ifndef KERNELRL_TOOLS_CODEMODEL_TEST_TASKS_H_
#define KERNELRL_TOOLS_CODEMODEL_TEST_TASKS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "data/family/family.h"
#include "proto/task.pb.h"

namespace kernelrl::codemodel::testing {

// The first training task of each family for `device` ("cpu" or "cuda"), as a task set holds it.
inline std::vector<v1::Task> FirstTrainingTaskPerFamily(const std::string& device) {
  std::vector<v1::Task> tasks;
  std::set<std::string> families;
  for (const auto& ft : data::family::MakeTasks(device)) {
    if (ft.held_out || !families.insert(ft.spec.family).second) continue;
    v1::Task t;
    t.set_id(ft.id);
    t.set_reference_source(ft.source);
    (*t.mutable_metadata())["shape"] = absl::StrJoin(ft.shape, "x");
    tasks.push_back(t);
  }
  return tasks;
}

}  // namespace kernelrl::codemodel::testing

#endif  // KERNELRL_TOOLS_CODEMODEL_TEST_TASKS_H_
