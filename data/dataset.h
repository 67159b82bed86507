// One dataset.jsonl line (DatasetRecord, data/data.proto) as the Task a
// learner job runs. The learner's task-set loader (learner/rl/job_config.h)
// accepts both plain Task lines and DatasetRecord lines through this, so the
// file data_synth writes is the file a JobSpec names: one format, no copy.
#ifndef KERNELRL_DATA_DATASET_H_
#define KERNELRL_DATA_DATASET_H_

#include "data/data.pb.h"
#include "proto/task.pb.h"

namespace kernelrl {

// The record's task with the record's facts (operators, counts, baselines,
// similarity) added to its metadata under "dataset.*" keys; keys the task
// already has are kept. Zero baselines (compiled_us: computed lazily) are
// left out rather than written as 0.
v1::Task TaskFromDatasetRecord(const v1::DatasetRecord& record);

}  // namespace kernelrl

#endif  // KERNELRL_DATA_DATASET_H_
