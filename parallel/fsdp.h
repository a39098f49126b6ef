// Fully sharded data parallelism, FSDP2 style (docs/architecture.md#decision-7).
//
// Every parameter's tensor-parallel slice [rows, cols] is split along dim 0 over the ranks of
// dp_shard × cp (torchtitan's dp_shard_cp: context-parallel ranks hold no extra replicas): shard
// s keeps rows [s·R, (s+1)·R), R = ⌈rows / shards⌉, zero-padded past the end.
// Those shards are the only persistent copy — they are what the optimizer steps (fp32 master
// weights and moments for the shard only) and what init writes.
//
// Around each parameter group (a block; the embedding; the head) the model calls the hooks:
//   before forward / backward  all-gather the group's shards in ONE collective (the shards of
//                              all its parameters packed together), and post the gather of the
//                              group that runs next, so it arrives while this one computes
//   after forward              free the gathered copies (reshard_after_forward), except for the
//                              head, whose backward comes next
//   after backward             reduce-scatter the group's gradients (fp32, one collective) into
//                              the shards' gradients, asynchronously; free gathered copies
// Mixed precision (ParamPlacement): the shards stay fp32; the gather packs them cast to the
// compute dtype (bf16 on CUDA), so the all-gather moves half the bytes and the model computes
// on bf16 weights, while their gradients are fp32 and reduce-scattered in fp32.
// finish_gradients() waits for the reduce-scatters and, with dp_replicate > 1 (HSDP),
// all-reduces the shard gradients over the replicas.
//
// Under pipeline parallelism a group's backward runs once per micro-batch, interleaved with
// other micro-batches' forwards, and a split backward computes its weight gradients in W, after
// the hook that ends its input half (model_comm.h). With defer_gradient_reduction
// (parallelism.pipeline_parallel_gradient_reduction step) the gathered gradients stay on the
// rank and accumulate over the step's micro-batches, and finish_gradients() reduce-scatters
// every group once (torchtitan's pipeline defers FSDP's gradient sync to the last micro-batch
// the same way). Without it (microbatch) each group is reduce-scattered after every micro-batch's
// backward, or after its W: a split backward makes no gradient for the deferred weights in I,
// only in W, so the micro-batches between their I and their W hold none
// (pipeline_gradient_reduction.h). A rank holds only its stages' groups, whatever their ids; a
// prefetch reaches only the group with the next id, so nothing is gathered for a stage that
// runs later.
//
// Coded parameters (model/param_gather_codec.h): a parameter given a codec travels through its
// own gather buffer in the codec's wire dtype — encoded per shard before the gather, decoded
// after it — instead of as values in the compute dtype. FSDP's body knows nothing of what a codec
// does; the one codec there is, FSDP's float8 all-gather (docs/architecture.md#decision-9,
// fp8/float8_all_gather.h), sends the FP8 linears' weights as e4m3 codes under the whole weight's
// scale, on the CPU and on CUDA alike. What a codec needs from the whole parameter (the scale) is
// computed by its update: before each group's gather, or, with update_after_step, for every coded
// parameter after each optimizer step in one collective (on_weights_updated).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/param_gather_codec.h"
#include "model/transformer.h"
#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

// How many parameter groups' all-gathers are posted ahead of the group that runs: while a block
// computes, the next one's parameters arrive. At most 1 + this many groups are gathered at once
// (what parallel/memory_estimate.h counts).
inline constexpr int kFsdpPrefetchGroups = 1;

struct CodedGather {
  std::shared_ptr<model::ParamGatherCodec> codec;  // null: every parameter travels as values
  std::vector<model::Parameter*> params;           // those that travel through the codec
  bool update_after_step = false;  // codec updates after each optimizer step, not per gather
};

class FullyShardedDataParallel final : public DataParallel {
 public:
  // Allocates the shards; the parameters themselves get storage only while gathered.
  FullyShardedDataParallel(std::vector<model::ParamGroup> groups, const DeviceMesh& mesh,
                           bool reshard_after_forward, CodedGather coded = {},
                           ParamPlacement placement = {}, bool defer_gradient_reduction = false);

  void init_weights(uint64_t seed) override;
  std::vector<model::Parameter*> optimizer_params() override;
  void zero_grad() override;
  void finish_gradients() override;
  void on_weights_updated() override;
  ParamMemory memory() const override;
  std::string describe() const override;

  void before_forward(int group) override;
  void after_forward(int group) override;
  void before_backward(int group) override;
  void after_backward(int group) override;
  void before_backward_input(int group, const std::vector<model::Parameter*>& deferred) override;
  void after_backward_input(int group, const std::vector<model::Parameter*>& deferred) override;
  void before_weight_gradients(int group) override;
  void after_weight_gradients(int group) override;
  bool weight_gradients_collective() const override { return !defer_gradient_reduction_; }

 private:
  struct ShardedParam {
    model::Parameter* param = nullptr;  // value and grad set only while gathered
    Shape local_shape;                  // the tp slice, [rows, cols] or [rows]
    int64_t rows = 0, cols = 0;
    int64_t shard_rows = 0;     // R
    int64_t offset = 0;         // in elements, within the group's packed gradients
    model::Parameter shard;     // same name; value and grad [R, cols] or [R]
    bool coded = false;         // gathered through the codec
    int64_t gather_offset = 0;  // within the packed values, or the packed codes
  };
  struct Group {
    std::string name;
    int id = 0;                        // in the whole model (model::ParamGroup)
    bool read_by_head = false;         // the tied embedding of a part with both ends
    DType dtype = DType::F32;          // the shards, gradients and reduce-scatter
    DType compute_dtype = DType::F32;  // the gathered parameters and the all-gather
    std::vector<ShardedParam> params;
    int64_t shard_numel = 0;  // Σ R·cols
    int64_t value_numel = 0;  // of it, gathered as values (the rest through the codec)
    int64_t code_numel = 0;
    Tensor gather_buffer;  // [shards · value_numel], rank-major
    Tensor code_buffer;    // [shards · code_numel] in the codec's wire dtype, rank-major
    Work gather, code_gather;
    bool gather_posted = false;
    bool materialized = false;
    Tensor reduce_send;  // [shards · shard_numel]
    Tensor reduce_out;   // [shard_numel]
    Work reduce;
    bool reduce_posted = false;
  };

  Group& group(int id);
  int index_of(int id) const;
  void post_gather(Group& g);
  // Zeros for each parameter without an unsharded gradient, but those in `except`.
  void make_gradients(Group& g, const std::vector<model::Parameter*>& except);
  void post_reduce(Group& g);  // packs the gathered gradients, posts their reduce-scatter
  void reduce_now(Group& g);   // post_reduce with one reduce-scatter in flight besides it
  void update_codec(const std::vector<ShardedParam*>& params);  // one collective
  void materialize(Group& g);  // waits for the gather, gives the parameters their values
  void release_values(Group& g);
  void drain_reduce(Group& g);  // waits for a posted reduce-scatter, adds into shard grads
  void track_unsharded(int64_t delta);

  std::vector<Group> groups_;
  DeviceMesh mesh_;
  bool reshard_after_forward_;
  bool defer_gradient_reduction_;
  std::map<int, int> index_of_id_;
  int reduce_in_flight_ = -1;  // the group whose reduce-scatter was posted last
  CodedGather coded_;
  ParamPlacement placement_;
  int64_t unsharded_bytes_ = 0, peak_unsharded_bytes_ = 0;
  int64_t gathered_bytes_ = 0;
};

}  // namespace titan::parallel
