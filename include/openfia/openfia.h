// openfia: umbrella header.
#pragma once

#include "openfia/attention_state.h"
#include "openfia/dtype.h"
#include "openfia/error.h"
#include "openfia/fused_infer_attention_score.h"
#include "openfia/kv_quant_sparse_flash_attention.h"
#include "openfia/runtime.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "openfia/tensor_view.h"
