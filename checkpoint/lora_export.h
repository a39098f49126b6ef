// A LoRA run's adapters out of a checkpoint, in the two forms Hugging Face users take them:
//
//   merged   W + (alpha/r)·B·A in every adapted weight: a plain Llama folder (hf_llama.h), which
//            any Llama 3 reader loads without knowing LoRA was used;
//   PEFT     the adapters alone, as the peft library saves and loads them beside the base model:
//            adapter_config.json and adapter_model.safetensors, tensors named
//            base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in] and
//            ….lora_B.weight [out, r] (q and k's B rows in HF's RoPE order, as their weights').
#pragma once

#include <string>

#include "checkpoint/hf_llama.h"
#include "core/dtype.h"
#include "model/config.h"

namespace titan::checkpoint {

// A reader of the adapted model's weights from one of the checkpoint's parameters: a base
// weight's rows come back with s·B·A added where it has an adapter, every other parameter as it
// is. `args` must have LoRA enabled, `read` hold the adapters.
ParamRowReader merged_lora_reader(const model::ModelArgs& args, ParamRowReader read);

// Writes out_folder (replacing it whole, through <out_folder>.tmp) with the adapters in PEFT's
// layout, in `dtype` (float32 or bfloat16). InputError when args has no LoRA.
void export_peft_adapters(const model::ModelArgs& args, const ParamRowReader& read,
                          const std::string& out_folder, DType dtype);

// The same from a step folder of a LoRA run.
void export_peft_adapters(const std::string& step_folder, const std::string& out_folder,
                          DType dtype);

}  // namespace titan::checkpoint
