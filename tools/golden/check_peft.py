#!/usr/bin/env python3
"""Checks by hand what checkpoint/peft_test writes (run once, not part of the build):

  bazel --output_base=... test //checkpoint:peft_test
  mkdir -p /tmp/peft_out && unzip -o -d /tmp/peft_out \
      bazel-testlogs/checkpoint/peft_test/test.outputs/outputs.zip
  python3 tools/golden/check_peft.py /tmp/peft_out/peft_test_roundtrip

1. adapter_model.safetensors equals torchtune's tune_to_peft_adapter_weights applied to the
   torchtune-named adapters the test also saved (tune_adapters.safetensors): same names, same
   shapes, bit-identical values (q/k lora_B row permutation included).
2. adapter_config.json loads with peft.LoraConfig.from_pretrained (r, lora_alpha,
   target_modules, peft_type LORA, task_type CAUSAL_LM).
3. peft.PeftModel.from_pretrained puts every tensor into a tiny transformers
   LlamaForCausalLM of the test's shape (d 16, 4 heads of 6, 2 KV heads, f 20, v 11,
   2 layers) with no missing or unexpected adapter keys, and the values it holds equal the
   file's.

Needs torch, safetensors, torchtune 0.6.1, transformers and peft (pip install peft accelerate).
"""
import importlib
import json
import os
import sys

# torchtune 0.6.1 imports NF4Tensor from torchao's old location; newer torchao moved it.
try:
    import torchao.dtypes.nf4tensor  # noqa: F401
except ImportError:
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")

import torch
from safetensors.torch import load_file


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    peft_sd = load_file(os.path.join(d, "adapter_model.safetensors"))
    tune_sd = load_file(os.path.join(d, "tune_adapters.safetensors"))

    from torchtune.models.convert_weights import tune_to_peft_adapter_weights
    want = tune_to_peft_adapter_weights(tune_sd, num_heads=4, num_kv_heads=2, dim=16,
                                        head_dim=6)
    assert sorted(want) == sorted(peft_sd), (sorted(set(want) ^ set(peft_sd)))
    for k, v in want.items():
        assert v.shape == peft_sd[k].shape, (k, v.shape, peft_sd[k].shape)
        assert torch.equal(v.contiguous(), peft_sd[k]), k
    print(f"1. {len(peft_sd)} tensors match torchtune's tune_to_peft_adapter_weights exactly")

    import peft
    cfg = peft.LoraConfig.from_pretrained(d)
    raw = json.load(open(os.path.join(d, "adapter_config.json")))
    assert cfg.peft_type == peft.PeftType.LORA and raw["peft_type"] == "LORA"
    assert str(cfg.task_type) in ("CAUSAL_LM", "TaskType.CAUSAL_LM"), cfg.task_type
    assert cfg.r == 3 and cfg.lora_alpha == 6.0, (cfg.r, cfg.lora_alpha)
    assert set(cfg.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                       "down_proj", "up_proj", "lm_head"}, cfg.target_modules
    print(f"2. LoraConfig: r={cfg.r} lora_alpha={cfg.lora_alpha} "
          f"target_modules={sorted(cfg.target_modules)} task_type={cfg.task_type}")

    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(
        vocab_size=11, hidden_size=16, intermediate_size=20, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=6, tie_word_embeddings=False))
    model = peft.PeftModel.from_pretrained(base, d)
    held = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    # PEFT names loaded weights with the adapter name ("lora_A.default.weight").
    held = {k.replace(".default", ""): v for k, v in held.items()}
    assert sorted(held) == sorted(peft_sd), sorted(set(held) ^ set(peft_sd))
    for k, v in peft_sd.items():
        assert torch.equal(held[k], v), k
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        y = model(x).logits
    assert torch.isfinite(y).all()
    print(f"3. PeftModel.from_pretrained loaded all {len(held)} adapter tensors "
          f"(peft {peft.__version__}); forward OK, logits {tuple(y.shape)}")
    print("OK")


if __name__ == "__main__":
    main()
