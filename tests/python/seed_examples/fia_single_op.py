# The single-operator example ("单算子模式调用") of the public torch_npu documentation of
# npu_fused_infer_attention_score, verbatim but for the line breaks the page lost. Run unchanged on a CPU with
# `python -m openfia run fia_single_op.py` (tests/python/test_api.py runs it).
import torch
import torch_npu
import math
# 生成随机数据, 并发送到npu
q = torch.randn(1, 8, 164, 128, dtype=torch.float16).npu()
k = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
v = torch.randn(1, 8, 1024, 128, dtype=torch.float16).npu()
scale = 1/math.sqrt(128.0)
actseqlen = [164]
actseqlenkv = [1024]
# 调用FIA算子
out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, actual_seq_lengths = actseqlen, actual_seq_lengths_kv = actseqlenkv, num_heads = 8, input_layout = "BNSD", scale = scale, pre_tokens=65535, next_tokens=65535)
# 执行上述代码的输出out类似如下
print(out)
